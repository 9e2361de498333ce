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

/** A raw HTTP/1.1 answer (no chunked body): status, lower-cased headers and the JSON body. */
export function parseRawAnswer(answer: string) {
  const [head = "", body = ""] = answer.split("\r\n\r\n", 2);
  const [statusLine = "", ...lines] = head.split("\r\n");
  const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(":")).toLowerCase(), l.slice(l.indexOf(":") + 1).trim()]));
  return { status: Number(statusLine.split(" ")[1]), headers, body: JSON.parse(body) as Record<string, unknown> };
}
