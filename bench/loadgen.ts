/**
 * The load generator, a child process so it never shares an event loop with a server under
 * test: reads a LoadSpec as JSON on stdin, checks every response, prints a Measurement.
 * Closed loops run on autocannon, paced loads on paced() below.
 */
import { Agent, request as httpRequest } from "node:http";
import autocannon from "autocannon";
import { percentile } from "./basics.js";
import { checkResponse, type LoadSpec, type Measurement } from "./load.js";

const chunks: Buffer[] = [];
for await (const c of process.stdin) chunks.push(c as Buffer);
const spec = JSON.parse(Buffer.concat(chunks).toString("utf8")) as LoadSpec;

/** How long one paced request may take before it counts as failed. */
const PACED_TIMEOUT_MS = 10_000;

/**
 * An open loop timed from each request's scheduled moment (no coordinated omission).
 * autocannon's rate sends each second's share as one burst, so two paced loads met or
 * missed each other's bursts by chance.
 */
async function paced(spec: LoadSpec & { rate: number }): Promise<Measurement> {
  const url = new URL(spec.url);
  const agent = new Agent({ keepAlive: true, maxSockets: spec.connections, localAddress: spec.localAddress });
  const total = spec.requests ?? Math.round(spec.rate * (spec.seconds ?? 8));
  const interval = 1000 / spec.rate;
  const latencies: number[] = [];
  const statuses: Record<string, number> = {};
  const samples: string[] = [];
  let failures = 0;
  let answered = 0;
  let sent = 0;
  let last = 0;
  const start = performance.now() + 5;
  await new Promise<void>((resolve) => {
    const settle = (due: number, status: number | undefined, body: string, error?: string) => {
      last = performance.now();
      const problem = error ?? checkResponse(spec.check, status!, body);
      if (status !== undefined) {
        statuses[status] = (statuses[status] ?? 0) + 1;
        latencies.push(last - due);
      }
      if (problem) {
        failures++;
        if (samples.length < 5) samples.push(problem);
      }
      if (++answered === total) resolve();
    };
    const send = (i: number) => {
      const due = start + i * interval;
      const body = spec.bodies ? spec.bodies[i % spec.bodies.length] : spec.body;
      const headers: Record<string, string | number> = { ...spec.headers, ...spec.requestHeaders?.[i % spec.requestHeaders.length] };
      if (body !== undefined) headers["content-length"] = Buffer.byteLength(body);
      let done = false;
      const once = (status: number | undefined, text: string, error?: string) => {
        if (done) return;
        done = true;
        settle(due, status, text, error);
      };
      const req = httpRequest({ host: url.hostname, port: url.port, path: url.pathname + url.search, method: spec.method ?? "GET", headers, agent }, (res) => {
        const parts: Buffer[] = [];
        res.on("data", (c: Buffer) => parts.push(c));
        res.on("end", () => once(res.statusCode, Buffer.concat(parts).toString("utf8")));
        res.on("error", (err) => once(undefined, "", `response error: ${err.message}`));
      });
      req.setTimeout(PACED_TIMEOUT_MS, () => req.destroy(new Error(`no answer in ${PACED_TIMEOUT_MS} ms`)));
      req.on("error", (err) => once(undefined, "", `request error: ${err.message}`));
      req.end(body);
    };
    const tick = () => {
      const now = performance.now();
      while (sent < total && start + sent * interval <= now) send(sent++);
      if (sent < total) setTimeout(tick, Math.max(0, start + sent * interval - performance.now()));
    };
    setTimeout(tick, 5);
  });
  agent.destroy();
  const seconds = (last - start) / 1000;
  return {
    rps: seconds > 0 ? answered / seconds : 0,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    requests: answered,
    failures,
    samples,
    statuses,
  };
}

/** A closed loop on autocannon: every connection sends its next request when the last is answered. */
async function closedLoop(spec: LoadSpec): Promise<Measurement> {
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
  return {
    rps: secondsElapsed > 0 ? result.requests.total / secondsElapsed : 0,
    p50: result.latency.p50,
    p99: result.latency.p99,
    requests: result.requests.total,
    failures,
    samples,
  };
}

// Each generator takes only the options it implements; anything else is a bench's mistake.
if (spec.rate && (spec.rotate || spec.connectionHeaders)) throw new Error("a paced load takes requestHeaders, not rotate or connectionHeaders");
if (!spec.rate && spec.requestHeaders) throw new Error("requestHeaders are for paced loads");
const out = spec.rate ? await paced(spec as LoadSpec & { rate: number }) : await closedLoop(spec);
process.stdout.write(JSON.stringify(out));
