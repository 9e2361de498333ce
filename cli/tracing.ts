import { context, propagation, trace } from "@opentelemetry/api";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, SimpleSpanProcessor, type SpanExporter } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";

export interface Tracing {
  /** Flushes the spans not yet exported and unregisters the provider. */
  shutdown(): Promise<void>;
}

/**
 * Registers this process's OpenTelemetry tracer provider: the AsyncLocalStorage context
 * manager (so a span stays active across awaits), the W3C trace-context propagator, and
 * `exporter` behind a batching processor (`batch: false` exports each span as it ends:
 * tests). Gateway and core spans are made by their own code (gateways/shared/observability.ts,
 * core/observability/tracing.ts); nothing is instrumented automatically.
 */
export function startTracing(options: { exporter: SpanExporter; serviceName: string; batch?: boolean }): Tracing {
  const processor = options.batch === false ? new SimpleSpanProcessor(options.exporter) : new BatchSpanProcessor(options.exporter);
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ "service.name": options.serviceName }),
    spanProcessors: [processor],
  });
  provider.register();
  return {
    async shutdown() {
      // A collector that is down loses the last spans; it must not fail the shutdown.
      await provider.shutdown().catch(() => {});
      trace.disable();
      context.disable();
      propagation.disable();
    },
  };
}
