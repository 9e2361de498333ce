import { createServer, connect, type Server, type Socket } from "node:net";

/**
 * A TCP relay between core and PostgreSQL that the test can cut: existing connections torn down (a server
 * death, a partition), new ones refused (nothing listens), then restored. On another loopback address
 * (`at`) it also gives a server a second host.
 */
export async function startRelay(target: { host: string; port: number }, at: { host: string; port: number } = { host: "127.0.0.1", port: 0 }) {
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let port = at.port;
  const listen = () =>
    new Promise<void>((resolve) => {
      server = createServer((client) => {
        const upstream = connect(target.port, target.host);
        for (const s of [client, upstream]) {
          sockets.add(s);
          s.on("close", () => sockets.delete(s));
          s.on("error", () => s.destroy());
        }
        client.pipe(upstream).pipe(client);
      });
      server.listen(port, at.host, () => {
        port = (server!.address() as { port: number }).port;
        resolve();
      });
    });
  await listen();
  return {
    get port() {
      return port;
    },
    async cut() {
      await new Promise<void>((resolve) => {
        server!.close(() => resolve());
        for (const s of sockets) s.destroy();
      });
    },
    async restore() {
      if (!server?.listening) await listen();
    },
  };
}
