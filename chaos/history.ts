import { writeFile } from "node:fs/promises";

/**
 * One attempt of one request, as the client saw it. `op` groups the attempts of one
 * logical operation (a request and its identical retries); `start`/`end` are wall-clock
 * milliseconds of this machine, the same clock the replicas stamp rows with.
 */
export interface Attempt {
  n: number;
  op: string;
  kind: string;
  replica: string;
  method: string;
  path: string;
  body?: unknown;
  headers?: Record<string, string>;
  start: number;
  end: number;
  /** HTTP status, 0 for a transport failure (refused, reset, timeout). */
  status: number;
  response?: unknown;
  responseHeaders?: Record<string, string>;
  error?: string;
  /** Free-form facts a workload attaches (grant id, user, ...). */
  meta?: Record<string, unknown>;
}

export class History {
  readonly attempts: Attempt[] = [];
  private next = 0;

  record(a: Omit<Attempt, "n">): Attempt {
    const full = { n: this.next++, ...a };
    this.attempts.push(full);
    return full;
  }

  byKind(kind: string): Attempt[] {
    return this.attempts.filter((a) => a.kind === kind);
  }

  async save(file: string): Promise<void> {
    const lines = this.attempts.map((a) => JSON.stringify(a, (k, v) => (k === "authorization" ? "<redacted>" : v)));
    await writeFile(file, `${lines.join("\n")}\n`);
  }
}

export interface Target {
  name: string;
  url: string;
}

export interface HttpCall {
  method: "GET" | "POST";
  path: string;
  body?: unknown;
  headers?: Record<string, string>;
}

/** Sends one attempt and records it; never throws. */
export async function attempt(
  history: History,
  op: string,
  kind: string,
  target: Target,
  call: HttpCall,
  meta?: Record<string, unknown>,
  timeoutMs = 5000,
): Promise<Attempt> {
  const start = Date.now();
  let status = 0;
  let response: unknown;
  let error: string | undefined;
  const responseHeaders: Record<string, string> = {};
  try {
    const res = await fetch(target.url + call.path, {
      method: call.method,
      headers: { ...(call.body !== undefined ? { "content-type": "application/json" } : {}), ...call.headers },
      body: call.body !== undefined ? JSON.stringify(call.body) : undefined,
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await res.text();
    status = res.status;
    for (const h of ["x-request-id", "idempotent-replayed"]) {
      const v = res.headers.get(h);
      if (v !== null) responseHeaders[h] = v;
    }
    try {
      response = text ? JSON.parse(text) : undefined;
    } catch {
      response = text;
    }
  } catch (err) {
    status = 0;
    error =
      err instanceof Error
        ? `${err.name}: ${err.message}${(err as { cause?: { code?: string } }).cause?.code ? ` (${(err as { cause: { code: string } }).cause.code})` : ""}`
        : String(err);
  }
  return history.record({
    op,
    kind,
    replica: target.name,
    method: call.method,
    path: call.path,
    body: call.body,
    headers: call.headers,
    start,
    end: Date.now(),
    status,
    response,
    responseHeaders,
    error,
    meta,
  });
}

/** JSON-RPC error of a response body, if any. */
export function rpcError(a: Attempt): { code: number; message: string; data?: Record<string, unknown> } | undefined {
  const body = a.response as { error?: { code: number; message: string; data?: Record<string, unknown> } } | undefined;
  return body && typeof body === "object" ? body.error : undefined;
}

export function rpcResult<T = Record<string, unknown>>(a: Attempt): T | undefined {
  const body = a.response as { result?: T } | undefined;
  return a.status === 200 && body && typeof body === "object" ? body.result : undefined;
}

/**
 * Unconfirmed: the client cannot know whether the server acted (transport failure,
 * timeout, 5xx, or a JSON-RPC internal error such as audit_unavailable). Such a request is
 * retried identically until it gets a definitive answer.
 */
export function unconfirmed(a: Attempt): boolean {
  if (a.status === 0 || a.status >= 500) return true;
  const e = rpcError(a);
  return e !== undefined && e.code === -32603;
}
