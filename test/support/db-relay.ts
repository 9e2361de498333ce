import { createServer, connect, type Server, type Socket } from "node:net";

/**
 * A TCP relay between core and PostgreSQL that the test can cut: existing connections
 * are torn down (as when the server dies or a network partition drops them) and new ones
 * are refused (as when nothing listens any more), then restored.
 */
export async function startRelay(target: { host: string; port: number }) {
  const sockets = new Set<Socket>();
  let server: Server | undefined;
  let port = 0;
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
      server.listen(port, "127.0.0.1", () => {
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
