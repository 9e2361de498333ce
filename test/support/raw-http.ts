import net from "node:net";

/** Writes `bytes` on a fresh connection to `url`'s host and returns all the server sends until it closes the connection. */
export function rawExchange(url: string, bytes: string, encoding: "latin1" | "utf8" = "latin1"): Promise<string> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname, () => socket.write(bytes));
    let answer = "";
    socket.setEncoding(encoding);
    socket.on("data", (chunk: string) => {
      answer += chunk;
    });
    socket.on("error", reject);
    socket.on("close", () => resolve(answer));
  });
}
