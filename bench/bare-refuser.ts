/**
 * Child process of partner-token.bench.ts: a server that answers every request at once
 * with 429 and a short JSON body and does nothing else, the far end of a flood whose cost
 * is only the machine's (its load generator, the kernel, one more busy process). Plain
 * node:http, so it is cheaper per request than any real server. Prints its port as one
 * JSON line (startBenchChild), then serves until it is stopped.
 */
import { createServer } from "node:http";

const server = createServer((req, res) => {
  req.resume();
  req.on("end", () => {
    res.writeHead(429, { "content-type": "application/json", "retry-after": "60" });
    res.end('{"error":"rate_limited"}');
  });
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as { port: number }).port })}\n`);
});
