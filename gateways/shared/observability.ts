import type { Transport } from "@connectrpc/connect";
import { context, propagation, SpanKind, SpanStatusCode, trace, type Context, type Span } from "@opentelemetry/api";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { Histogram, Registry } from "prom-client";

/** The gateway's Prometheus metrics (merged with core's and the process's by the composition root). */
export const gatewayRegistry = new Registry();

const httpDuration = new Histogram({
  name: "vaultgate_http_request_duration_seconds",
  help: "Gateway HTTP requests by method, route pattern and status class, and how long each took (its _count is the request count)",
  labelNames: ["method", "route", "status_class"] as const,
  // Seconds: cached pages and JSON under a millisecond up to a slow secret check or database.
  buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  registers: [gatewayRegistry],
});

const kSpan = Symbol("vaultgate.span");
const kContext = Symbol("vaultgate.traceContext");
type Traced = FastifyRequest & { [kSpan]?: Span; [kContext]?: Context };

/**
 * Records every response by route pattern (never the raw path), and with `tracing` a server
 * span so calls to core carry its context. A client's `traceparent` is not followed: every
 * public request starts a new trace, as it gets a new request id.
 */
export function observeRequests(app: FastifyInstance, options: { tracing: boolean }): void {
  // One labelled series per method, route pattern and status class, looked up once: the
  // label set is bounded (HTTP methods, the app's routes, five classes), and prom-client's
  // own lookup hashes the labels on every call.
  const series = new Map<string, ReturnType<typeof httpDuration.labels>>();
  app.addHook("onResponse", (request, reply, done) => {
    const route = request.routeOptions.url ?? "unmatched";
    const status = reply.statusCode;
    const statusClass = `${Math.floor(status / 100)}xx`;
    const key = `${request.method} ${statusClass} ${route}`;
    let observed = series.get(key);
    if (!observed) series.set(key, (observed = httpDuration.labels(request.method, route, statusClass)));
    observed.observe(reply.elapsedTime / 1000);
    const span = (request as Traced)[kSpan];
    if (span) {
      span.setAttribute("http.response.status_code", status);
      if (request.routeOptions.url) span.updateName(`${request.method} ${request.routeOptions.url}`);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      span.end();
    }
    done();
  });
  if (!options.tracing) return;

  const tracer = trace.getTracer("vaultgate-gateway");
  app.addHook("onRequest", (request, _reply, done) => {
    const span = tracer.startSpan(`${request.method}`, {
      kind: SpanKind.SERVER,
      root: true,
      attributes: { "http.request.method": request.method, "url.path": request.url.split("?", 1)[0], "vaultgate.request_id": request.id },
    });
    const ctx = trace.setSpan(context.active(), span);
    (request as Traced)[kSpan] = span;
    (request as Traced)[kContext] = ctx;
    context.with(ctx, done);
  });
  // Body parsing runs in the request stream's callbacks, outside the context entered
  // above; enter it again for validation, the handler, and the core calls they make.
  app.addHook("preValidation", (request, _reply, done) => {
    const ctx = (request as Traced)[kContext];
    if (ctx) context.with(ctx, done);
    else done();
  });
}

/**
 * A transport that sends the active trace context (W3C `traceparent`/`tracestate`) with
 * every call: as gRPC metadata over the network, as a header of the in-process call.
 */
export function tracedTransport(inner: Transport): Transport {
  const withTraceContext = (header: ConstructorParameters<typeof Headers>[0]): ConstructorParameters<typeof Headers>[0] => {
    const active = trace.getSpan(context.active());
    if (!active) return header;
    const h = new Headers(header);
    propagation.inject(context.active(), h, { set: (carrier, key, value) => carrier.set(key, value) });
    return h;
  };
  return {
    unary: (method, signal, timeoutMs, header, input, contextValues) => inner.unary(method, signal, timeoutMs, withTraceContext(header), input, contextValues),
    stream: (method, signal, timeoutMs, header, input, contextValues) =>
      inner.stream(method, signal, timeoutMs, withTraceContext(header), input, contextValues),
  };
}
