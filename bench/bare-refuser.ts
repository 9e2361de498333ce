/**
 * Child process of partner-token.bench.ts: answers every request at once with 429 and does
 * nothing else, so a flood aimed at it measures what the flood costs the machine alone.
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
