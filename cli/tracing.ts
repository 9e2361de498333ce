import { context, propagation, trace } from "@opentelemetry/api";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, SimpleSpanProcessor, type SpanExporter } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";

export interface Tracing {
  /** Flushes the spans not yet exported and unregisters the provider. */
  shutdown(): Promise<void>;
}

/**
 * Registers the OpenTelemetry tracer provider: AsyncLocalStorage context (spans survive awaits),
 * W3C propagation, batched export (`batch: false` for tests). Nothing is auto-instrumented:
 * gateway and core code make their own spans.
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
