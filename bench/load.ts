/** One load at a time in the load-generator process (bench/loadgen.ts), every response checked. */
import { spawn } from "node:child_process";
import { seconds } from "./basics.js";
import { waitedShare } from "./machine-load.js";
import { mainThreadSched } from "./machine-watch.js";
import { benchScript } from "./processes.js";

// ---------------------------------------------------------------------------------------
// Load generation (bench/loadgen.ts, a child process) with a check of every response

/** What a response must be to count as a success. */
export interface BodyCheck {
  /** Expected HTTP status (default 200), or the statuses any of which is right. */
  status?: number | readonly number[];
  /** Dotted paths that must be present (not undefined) in the JSON body. */
  keys?: string[];
  /** A JSON-RPC response with a `result`, no `error`, and no `result.isError`. */
  jsonrpc?: boolean;
}

export interface LoadSpec {
  url: string;
  method?: "GET" | "POST";
  headers?: Record<string, string>;
  /** The same body on every request. */
  body?: string;
  /** Each body sent exactly once (single-use codes); the run ends when all are answered. */
  bodies?: string[];
  /**
   * Refresh-token rotation: each request presents the newest token of one lineage (a form
   * body of `form` plus `field=<token>`), and its answer's `field` goes back to the pool.
   */
  rotate?: { tokens: string[]; form: Record<string, string>; field: string };
  /** Per-connection headers, round-robin over connections (e.g. one partner each). */
  connectionHeaders?: Record<string, string>[];
  /** Per-request headers, round-robin over requests (paced loads only). */
  requestHeaders?: Record<string, string>[];
  /** Source address of the connections (paced loads only; e.g. 127.0.1.1, another client address on loopback). */
  localAddress?: string;
  connections: number;
  /** Duration in seconds (ignored with `bodies`). */
  seconds?: number;
  /**
   * Requests per second in all: an open loop that sends one request every 1/rate s on
   * whichever of `connections` is free, whatever the answers (bench/loadgen.ts, "paced").
   */
  rate?: number;
  /** Stop after this many requests instead of after `seconds` (a paced load: exactly this many). */
  requests?: number;
  check: BodyCheck;
  /**
   * The process whose main thread answers (`process.pid` for a server in the bench's own
   * process): the measurement then says how long that thread waited for a core.
   */
  server?: number;
}

export interface Measurement {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  /** Requests that failed: non-2xx or unexpected status, a body that does not match, an error, a timeout. */
  failures: number;
  /** A few failures, for the printout. */
  samples: string[];
  /** How many answers had each HTTP status (paced loads). */
  statuses?: Record<string, number>;
  /**
   * With `server`: of the time the server's main thread was ready to run during the load,
   * the share it waited while other tasks held every core (see `waitedShare`).
   */
  serverWaited?: number;
}

export function checkResponse(check: BodyCheck, status: number, body: string): string | undefined {
  const want = check.status ?? 200;
  if (typeof want === "number" ? status !== want : !want.includes(status)) return `HTTP ${status} (want ${String(want)}): ${body.slice(0, 200)}`;
  if (!check.jsonrpc && !check.keys?.length) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return `not JSON: ${body.slice(0, 200)}`;
  }
  if (check.jsonrpc) {
    const rpc = json as { error?: unknown; result?: { isError?: boolean } };
    if (rpc.error !== undefined) return `JSON-RPC error: ${JSON.stringify(rpc.error).slice(0, 200)}`;
    if (rpc.result === undefined) return `no JSON-RPC result: ${body.slice(0, 200)}`;
    if (rpc.result.isError) return `tool error: ${body.slice(0, 200)}`;
  }
  for (const key of check.keys ?? []) {
    let v: unknown = json;
    for (const part of key.split(".")) v = v === null || typeof v !== "object" ? undefined : (v as Record<string, unknown>)[part];
    if (v === undefined) return `missing ${key}: ${body.slice(0, 200)}`;
  }
  return undefined;
}

/** Runs one load in the load-generator process (only ever against 127.0.0.1). */
export async function load(spec: LoadSpec): Promise<Measurement> {
  if (!/^http:\/\/127\.0\.0\.1[:/]/.test(spec.url)) throw new Error("benchmarks only target 127.0.0.1");
  const child = spawn(process.execPath, benchScript("loadgen"), { stdio: ["pipe", "pipe", "inherit"] });
  let out = "";
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
  const before = spec.server === undefined ? undefined : mainThreadSched(spec.server);
  child.stdin!.end(JSON.stringify({ seconds: seconds(8), ...spec }));
  const code = await exited;
  if (code !== 0) throw new Error(`load generator exited with ${code}: ${out}`);
  const measured = JSON.parse(out) as Measurement;
  if (spec.server !== undefined) measured.serverWaited = waitedShare(before, mainThreadSched(spec.server));
  return measured;
}
