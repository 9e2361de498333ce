/**
 * The load generator, a child process of the bench so it never shares an event loop with
 * a server under test: reads a LoadSpec (bench/support.ts) as JSON on stdin, runs
 * autocannon against 127.0.0.1, checks every response (status and body), and prints a
 * Measurement as JSON on stdout.
 */
import autocannon from "autocannon";
import { checkResponse, type LoadSpec, type Measurement } from "./support.js";

const chunks: Buffer[] = [];
for await (const c of process.stdin) chunks.push(c as Buffer);
const spec = JSON.parse(Buffer.concat(chunks).toString("utf8")) as LoadSpec;

let failures = 0;
const samples: string[] = [];
const clock = { first: 0, last: 0 };
const record = (status: number, body: string) => {
  clock.last = performance.now();
  const problem = checkResponse(spec.check, status, body);
  if (problem) {
    failures++;
    if (samples.length < 5) samples.push(problem);
  }
};
const started = () => {
  if (clock.first === 0) clock.first = performance.now();
};

const rotatePool = spec.rotate ? [...spec.rotate.tokens] : [];
let nextBody = 0;
const request = {
  setupRequest: (req: Record<string, unknown>) => {
    started();
    if (spec.bodies) return { ...req, body: spec.bodies[nextBody++ % spec.bodies.length] };
    if (spec.rotate) {
      // An empty pool means lineages were lost: the request then fails and is counted.
      const token = rotatePool.shift() ?? "exhausted";
      return { ...req, body: new URLSearchParams({ ...spec.rotate.form, [spec.rotate.field]: token }).toString() };
    }
    return req;
  },
  onResponse: (status: number, body: string) => {
    record(status, body);
    if (spec.rotate && status === 200) {
      try {
        const next = (JSON.parse(body) as Record<string, string>)[spec.rotate.field];
        if (next) rotatePool.push(next);
      } catch {
        /* counted by record */
      }
    }
  },
};

let nextConnection = 0;
const options: autocannon.Options = {
  url: spec.url,
  method: spec.method ?? "GET",
  connections: spec.connections,
  headers: spec.headers ?? {},
  ...(spec.body !== undefined ? { body: spec.body } : {}),
  ...(spec.bodies ? { amount: spec.bodies.length } : spec.requests ? { amount: spec.requests } : { duration: spec.seconds ?? 8 }),
  // A paced load records each response's own latency. autocannon's coordinated-omission
  // correction back-fills synthetic samples at an interval of ceil(1 / rate) = 1 ms (the
  // rate is per second, the histogram in ms): one 100 ms stall added 99 invented samples
  // from 1 to 99 ms, enough to make a p99 of 1,000 reads out of a single slow answer.
  ...(spec.rate ? { overallRate: spec.rate, ignoreCoordinatedOmission: true } : {}),
  requests: [request as never],
  ...(spec.connectionHeaders
    ? {
        setupClient: (client: { setHeaders(h: Record<string, string>): void }) => {
          client.setHeaders({ ...spec.headers, ...spec.connectionHeaders![nextConnection++ % spec.connectionHeaders!.length]! });
        },
      }
    : {}),
};
const result = await autocannon(options);
const secondsElapsed = (clock.last - clock.first) / 1000;
// Connection errors and timeouts get no response: they are failures too.
failures += result.errors + result.timeouts;
if (result.errors + result.timeouts > 0 && samples.length < 5) samples.push(`${result.errors} connection errors, ${result.timeouts} timeouts`);
const out: Measurement = {
  rps: secondsElapsed > 0 ? result.requests.total / secondsElapsed : 0,
  p50: result.latency.p50,
  p99: result.latency.p99,
  requests: result.requests.total,
  failures,
  samples,
};
process.stdout.write(JSON.stringify(out));
