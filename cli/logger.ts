import { isSpanContextValid, trace } from "@opentelemetry/api";
import pino, { type Logger, type DestinationStream } from "pino";

/** pino's own destination stream (sonic-boom). */
type SonicBoom = ReturnType<typeof pino.destination>;

/**
 * What is blanked in every log line and in every child logger's bindings (no
 * secret or token in a log): these keys at the top level, the second-level keys below
 * under any top-level key, and the authorization and cookie headers of a logged request.
 */
const SECRET_TOP_KEYS = new Set(["authorization", "cookie", "client_secret", "refresh_token", "access_token", "password", "token", "secret"]);
const SECRET_NESTED_KEYS = new Set([
  "client_secret",
  "clientSecret",
  "refresh_token",
  "refreshToken",
  "access_token",
  "accessToken",
  "code",
  "code_verifier",
  "password",
  "token",
  "secret",
]);
/** Under `req.headers`; a top-level `headers` object has only its authorization blanked. */
const SECRET_HEADERS = new Set(["authorization", "cookie"]);
const HEADER_AUTHORIZATION = new Set(["authorization"]);
const CENSOR = "[redacted]";

/** The same value with its own properties (and an error's message and stack) copied. */
function copyOf(value: object): Record<string, unknown> {
  if (value instanceof Error) return Object.create(Object.getPrototypeOf(value), Object.getOwnPropertyDescriptors(value)) as Record<string, unknown>;
  return { ...(value as Record<string, unknown>) };
}

const isObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

/** `headers` with the secret headers blanked, or `headers` itself when it has none. */
function redactHeaders(headers: Record<string, unknown>, names: ReadonlySet<string>): Record<string, unknown> {
  let out = headers;
  for (const name of names) {
    if (headers[name] === undefined) continue;
    if (out === headers) out = copyOf(headers);
    out[name] = CENSOR;
  }
  return out;
}

/** A second-level value with its secret keys (and, under `req`, its secret headers) blanked. */
function redactNested(parent: string, value: Record<string, unknown>): Record<string, unknown> {
  let out = value;
  for (const key in value) {
    if (!Object.hasOwn(value, key)) continue;
    let next: unknown = value[key];
    if (SECRET_NESTED_KEYS.has(key)) next = CENSOR;
    else if (parent === "req" && key === "headers" && isObject(next)) next = redactHeaders(next, SECRET_HEADERS);
    if (next === value[key]) continue;
    if (out === value) out = copyOf(value);
    out[key] = next;
  }
  return out;
}

/**
 * Blanks secrets in a log line's fields without changing the caller's objects, and without a
 * copy when there is nothing to blank: pino's path-based `redact` cloned every field of every
 * line and was the largest cost of the per-request log line.
 */
function redactSecrets(fields: Record<string, unknown>): Record<string, unknown> {
  let out = fields;
  for (const key in fields) {
    if (!Object.hasOwn(fields, key)) continue;
    const value = fields[key];
    let next: unknown = value;
    if (SECRET_TOP_KEYS.has(key)) next = CENSOR;
    else if (isObject(value)) next = key === "headers" ? redactNested(key, redactHeaders(value, HEADER_AUTHORIZATION)) : redactNested(key, value);
    if (next === value) continue;
    if (out === fields) out = { ...fields };
    out[key] = next;
  }
  return out;
}

/**
 * Fields of database errors that carry a statement's bound values: knex's `bindings`,
 * pg's `detail` ("Key (email)=(x@y) already exists") and `where`, PGlite's `params`.
 * Dropped from every logged error and its causes.
 */
const BOUND_VALUE_FIELDS = ["bindings", "parameters", "params", "detail", "where", "internalQuery"];
/** PostgreSQL quotes values (and names) into its messages in double quotes, in several forms. */
const QUOTED = /"(?:[^"\\]|\\.)*"/g;
const SQLSTATE = /^[0-9A-Z]{5}$/;

/** An error as pino's standard serializer gives it, without any value a statement was bound to. */
function serializeError(err: unknown): unknown {
  const out = pino.stdSerializers.err(err as Error) as unknown;
  return scrubBoundValues(out, 0, fromDatabase(err));
}

/** True when the error or one of its causes came from the database (pg and PGlite give a severity). */
function fromDatabase(err: unknown): boolean {
  let e = err;
  for (let depth = 0; isObject(e) && depth < 8; depth++, e = e.cause) {
    if (typeof e.severity === "string" || (typeof e.code === "string" && SQLSTATE.test(e.code))) return true;
  }
  return false;
}

// The serializer folds causes' messages and stacks into the outer error's, so a database
// error anywhere in the chain has every quoted text blanked at every level.
function scrubBoundValues(value: unknown, depth: number, database: boolean): unknown {
  if (!isObject(value) || depth > 4) return value;
  const out: Record<string, unknown> = { ...value };
  for (const f of BOUND_VALUE_FIELDS) if (f in out) delete out[f];
  const here = database || typeof out.severity === "string" || (typeof out.code === "string" && SQLSTATE.test(out.code));
  if (here) for (const k of ["message", "stack"]) if (typeof out[k] === "string") out[k] = (out[k] as string).replace(QUOTED, `"${CENSOR}"`);
  for (const k of Object.keys(out)) if (isObject(out[k])) out[k] = scrubBoundValues(out[k], depth + 1, here);
  return out;
}

/** Bytes of log lines gathered before they are written out together. */
export const LOG_BUFFER_BYTES = 4096;
/** The longest an info line waits in the buffer. */
export const LOG_FLUSH_MS = 100;

const buffered = new Set<SonicBoom>();
let flushAtExit = false;

/**
 * Buffered synchronous log writes: a write per line cost partner reads CPU, and async pino writes
 * queued on the libuv pool behind other work. Warn and above flush at once and the rest at exit, so
 * only SIGKILL loses the last LOG_FLUSH_MS of info lines. `dest`: stdout, a descriptor or a path.
 */
export function logDestination(dest: number | string = 1): SonicBoom {
  const stream = pino.destination({ dest, sync: true, minLength: LOG_BUFFER_BYTES, periodicFlush: LOG_FLUSH_MS });
  buffered.add(stream);
  stream.once("close", () => buffered.delete(stream));
  if (!flushAtExit) {
    flushAtExit = true;
    // No event loop is left at 'exit': each buffer is written synchronously.
    process.once("exit", () => {
      for (const s of buffered) {
        try {
          s.flushSync();
        } catch {
          /* a closed or broken stdout: nothing more can be written */
        }
      }
    });
  }
  return stream;
}

/** pino's level number of `warn`: lines at or above it are written at once. */
const WARN = 40;

export function createLogger(level: string, destination?: DestinationStream): Logger {
  const stream = destination ?? logDestination();
  const flush = typeof (stream as { flush?: unknown }).flush === "function" ? () => (stream as SonicBoom).flush() : undefined;
  const logger = pino(
    {
      level,
      mixin: traceFields,
      formatters: { log: redactSecrets, bindings: redactSecrets },
      serializers: {
        err: serializeError,
        cause: serializeError,
        // Paths only: query strings can carry codes and states.
        req: (req: { method: string; url: string; id: string }) => ({ method: req.method, path: req.url.split("?")[0], id: req.id }),
      },
      // Warnings and errors are not left in the buffer: an operator sees them at once,
      // and a process that dies next has written them.
      ...(flush && {
        hooks: {
          logMethod(args, method, lineLevel) {
            method.apply(this, args);
            if (lineLevel >= WARN) flush();
          },
        },
      }),
    },
    stream,
  );
  // pino applies `formatters.bindings` to the root's own bindings only; a child's are
  // blanked here. Children inherit this method, so grandchildren are covered too.
  const child = logger.child;
  logger.child = function (this: Logger, bindings, options) {
    return child.call(this, redactSecrets(bindings), options);
  } as Logger["child"];
  return logger;
}

/**
 * `traceId` and `spanId` of the span active where a line is written (when tracing is on,
 * docs/operating-observability.md), so a log line leads to its trace and back.
 */
function traceFields(): object {
  // A fresh object each time: pino merges the line's own fields into it.
  const span = trace.getActiveSpan();
  if (!span) return {};
  const sc = span.spanContext();
  return isSpanContextValid(sc) ? { traceId: sc.traceId, spanId: sc.spanId } : {};
}
