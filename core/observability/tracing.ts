import type { DescMethod } from "@bufbuild/protobuf";
import { Code, ConnectError, type Interceptor, type StreamResponse } from "@connectrpc/connect";
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type TextMapGetter } from "@opentelemetry/api";
import { rpcDuration } from "./metrics.js";

/** Reads W3C trace context (traceparent, tracestate) from a call's headers: gRPC metadata or the in-process headers object. */
const headerGetter: TextMapGetter<Headers> = {
  get: (h, key) => h.get(key) ?? undefined,
  keys: (h) => [...h.keys()],
};

/** gRPC's names for status codes (OK, INVALID_ARGUMENT, ...), as the metrics label them. */
const CODE_NAMES = new Map<Code | 0, string>([[0, "OK"]]);
for (const [name, value] of Object.entries(Code)) {
  if (typeof value === "number") CODE_NAMES.set(value, name.replace(/([a-z])([A-Z])/g, "$1_$2").toUpperCase());
}

/** Codes that mean the server failed (a span error), as opposed to a refused request. */
const SERVER_FAULTS = new Set<Code>([Code.Unknown, Code.Internal, Code.Unavailable, Code.DataLoss, Code.DeadlineExceeded, Code.Unimplemented]);

/**
 * Outermost interceptor, so the RPC duration metric and the server span (continuing the caller's
 * W3C trace context) cover every inner interceptor, the handler, their log lines and whole streams.
 */
export function observeCalls(options: { tracing: boolean }): Interceptor {
  // labels() hashes its arguments on every call; the children never change.
  const children = new WeakMap<DescMethod, Map<Code | 0, ReturnType<typeof rpcDuration.labels>>>();
  const observe = (method: DescMethod, code: Code | 0, seconds: number) => {
    let byCode = children.get(method);
    if (!byCode) children.set(method, (byCode = new Map()));
    let child = byCode.get(code);
    if (!child) byCode.set(code, (child = rpcDuration.labels(method.parent.typeName, method.name, CODE_NAMES.get(code) ?? String(code))));
    child.observe(seconds);
  };
  const tracer = trace.getTracer("vaultgate-core");

  return (next) => async (req) => {
    const started = performance.now();
    const span = options.tracing
      ? tracer.startSpan(
          `${req.service.typeName}/${req.method.name}`,
          {
            kind: SpanKind.SERVER,
            attributes: { "rpc.system": "connect_rpc", "rpc.service": req.service.typeName, "rpc.method": req.method.name },
          },
          propagation.extract(ROOT_CONTEXT, req.header, headerGetter),
        )
      : undefined;
    const finish = (code: Code | 0, err?: unknown) => {
      observe(req.method, code, (performance.now() - started) / 1000);
      if (!span) return;
      span.setAttribute("rpc.grpc.status_code", code);
      if (code !== 0 && SERVER_FAULTS.has(code))
        span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof ConnectError ? err.rawMessage : undefined });
      span.end();
    };
    try {
      const res = span ? await context.with(trace.setSpan(context.active(), span), () => next(req)) : await next(req);
      if (!res.stream) {
        finish(0);
        return res;
      }
      return { ...res, message: watchStream(res.message, finish) } as StreamResponse;
    } catch (err) {
      finish(err instanceof ConnectError ? err.code : Code.Internal, err);
      throw err;
    }
  };
}

async function* watchStream<T>(messages: AsyncIterable<T>, finish: (code: Code | 0, err?: unknown) => void): AsyncIterable<T> {
  let done = false;
  try {
    yield* messages;
    done = true;
    finish(0);
  } catch (err) {
    done = true;
    finish(err instanceof ConnectError ? err.code : Code.Internal, err);
    throw err;
  } finally {
    // The client went away before the end.
    if (!done) finish(Code.Canceled);
  }
}
