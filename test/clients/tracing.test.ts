import { expect } from "chai";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { Transport } from "@connectrpc/connect";
import { SpanKind, trace } from "@opentelemetry/api";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { InMemorySpanExporter, type ReadableSpan, type SpanExporter } from "@opentelemetry/sdk-trace-base";
import type { FastifyInstance } from "fastify";
import { startTracing, type Tracing } from "../../cli/tracing.js";
import { createInProcessTransport } from "../../core/in-process-transport.js";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { buildGateway } from "../../gateways/app.js";
import { createCoreClients } from "../../gateways/core-clients.js";
import { tracedTransport } from "../../gateways/shared/observability.js";
import { startStack, TEST_ISSUER, type TestStack } from "../support/stack.js";

/**
 * One trace from the gateway request to the core RPC, over the in-process transport and
 * over a real gRPC hop: the core span is the child of the gateway span, and the log
 * lines core writes while serving the call carry the trace id.
 */
describe("tracing: W3C trace context from the gateway to core", function () {
  this.timeout(60_000);
  const exporter = new InMemorySpanExporter();
  let tracing: Tracing;
  let stack: TestStack;
  let coreServer: CoreServer;

  before(async () => {
    tracing = startTracing({ exporter, serviceName: "vaultgate-test", batch: false });
    stack = await startStack({ tracing: true, webhookPollMs: 0 });
    coreServer = await startCoreServer(stack.core, 0, "127.0.0.1");
  });
  after(async () => {
    await coreServer?.close();
    await stack?.close();
    await tracing?.shutdown();
  });

  const transports: [string, () => Transport, boolean][] = [
    ["in-process transport (headers object)", () => createInProcessTransport(stack.core.routes, stack.core.interceptors), false],
    ["gRPC over h2c (metadata)", () => createGrpcTransport({ baseUrl: coreServer.url }), true],
  ];

  for (const [name, makeTransport, remoteCore] of transports) {
    describe(name, () => {
      let gateway: FastifyInstance;
      let url: string;
      before(async () => {
        gateway = await buildGateway({
          clients: createCoreClients(tracedTransport(makeTransport()), { gatewayToken: stack.gatewayToken }),
          logger: stack.logs.logger,
          urls: { issuer: TEST_ISSUER, baseUrl: TEST_ISSUER, authUrl: TEST_ISSUER, appUrl: TEST_ISSUER, mcpUrl: TEST_ISSUER },
          tracing: true,
        });
        await gateway.listen({ port: 0, host: "127.0.0.1" });
        url = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
      });
      after(async () => {
        await gateway?.close();
      });
      beforeEach(() => exporter.reset());

      const spansOf = (traceId: string) => exporter.getFinishedSpans().filter((s) => s.spanContext().traceId === traceId);
      const gatewaySpan = (method: string, route: string): ReadableSpan => {
        const found = exporter.getFinishedSpans().filter((s) => s.kind === SpanKind.SERVER && s.name === `${method} ${route}`);
        expect(found, `one gateway span for ${method} ${route}`).to.have.length(1);
        return found[0]!;
      };

      it("a GET: the core span is a child of the gateway span, in one trace", async () => {
        const res = await fetch(`${url}/.well-known/agent-jwks.json`);
        expect(res.status).to.equal(200);
        const edge = gatewaySpan("GET", "/.well-known/agent-jwks.json");
        const traceId = edge.spanContext().traceId;
        const core = spansOf(traceId).filter((s) => s.name === "vaultgate.grants.v1.GrantsService/GetJwks");
        expect(core).to.have.length(1);
        expect(core[0]!.parentSpanContext?.spanId).to.equal(edge.spanContext().spanId);
        expect(core[0]!.kind).to.equal(SpanKind.SERVER);
        expect(core[0]!.attributes).to.include({
          "rpc.system": "connect_rpc",
          "rpc.service": "vaultgate.grants.v1.GrantsService",
          "rpc.method": "GetJwks",
          "rpc.grpc.status_code": 0,
        });
        expect(edge.attributes).to.include({
          "http.request.method": "GET",
          "url.path": "/.well-known/agent-jwks.json",
          "http.response.status_code": 200,
          "vaultgate.request_id": res.headers.get("x-request-id"),
        });
        expect(edge.parentSpanContext).to.equal(undefined);
      });

      it("a POST with a body (context kept across body parsing), and the refusal's log lines carry the trace id", async () => {
        const before = stack.logs.lines.length;
        const res = await fetch(`${url}/api/partner/users`, {
          method: "POST",
          headers: { authorization: "Bearer not-a-real-token", "content-type": "application/json" },
          body: JSON.stringify({ email: "someone@example.com" }),
        });
        expect(res.status).to.equal(401);
        const edge = gatewaySpan("POST", "/api/partner/users");
        expect(edge.attributes).to.include({ "http.response.status_code": 401, "vaultgate.request_id": res.headers.get("x-request-id") });
        const traceId = edge.spanContext().traceId;
        const core = spansOf(traceId).filter((s) => s.name.startsWith("vaultgate."));
        expect(core.length).to.be.at.least(1);
        for (const s of core) {
          expect(s.parentSpanContext?.spanId).to.equal(edge.spanContext().spanId);
          expect(s.kind).to.equal(SpanKind.SERVER);
        }
        const lines = stack.logs.lines.slice(before).map((l) => JSON.parse(l) as Record<string, unknown>);
        // The gateway's request line names the refusal, in the edge span.
        const [line, ...more] = lines.filter((l) => l.msg === "request" && l.reqId === res.headers.get("x-request-id"));
        expect(more).to.deep.equal([]);
        expect(line).to.include({ status: 401, reason: "INVALID_TOKEN", traceId, spanId: edge.spanContext().spanId });
        const refused = lines.filter((l) => l.msg === "rpc refused");
        if (remoteCore) {
          // Core in a process of its own logs the refusal too, in its own span.
          expect(refused.length, "core logged the refusal").to.be.at.least(1);
          expect(refused.every((l) => l.traceId === traceId)).to.equal(true);
          expect(core.some((s) => s.spanContext().spanId === refused[0]!.spanId)).to.equal(true);
        } else {
          expect(refused, "core leaves an in-process refusal to the request line").to.deep.equal([]);
        }
      });

      it("does not follow a client's traceparent: every public request starts a new trace", async () => {
        const foreign = "0af7651916cd43dd8448eb211c80319c";
        const res = await fetch(`${url}/.well-known/agent-jwks.json`, { headers: { traceparent: `00-${foreign}-b7ad6b7169203331-01` } });
        expect(res.status).to.equal(200);
        const edge = gatewaySpan("GET", "/.well-known/agent-jwks.json");
        expect(edge.spanContext().traceId).to.not.equal(foreign);
        expect(edge.parentSpanContext).to.equal(undefined);
        expect(spansOf(edge.spanContext().traceId).filter((s) => s.name === "vaultgate.grants.v1.GrantsService/GetJwks")).to.have.length(1);
        expect(exporter.getFinishedSpans().some((s) => s.spanContext().traceId === foreign)).to.equal(false);
      });
    });
  }
});

describe("tracing: a collector that cannot be reached", () => {
  it("loses spans but never fails the shutdown", async () => {
    // Watch the real OTLP exporter: the span must reach it and its export must fail.
    const otlp = new OTLPTraceExporter({ url: "http://127.0.0.1:1/v1/traces", timeoutMillis: 500 });
    const attempts: { names: string[]; failed: boolean }[] = [];
    const exporter: SpanExporter = {
      export: (spans, done) =>
        otlp.export(spans, (result) => {
          attempts.push({ names: spans.map((s) => s.name), failed: result.error !== undefined });
          done(result);
        }),
      shutdown: () => otlp.shutdown(),
      forceFlush: () => otlp.forceFlush(),
    };
    const tracing = startTracing({ exporter, serviceName: "vaultgate-test" });
    trace.getTracer("test").startSpan("lost").end();
    await tracing.shutdown(); // resolves: a rejection would fail this test
    expect(attempts).to.deep.equal([{ names: ["lost"], failed: true }]);
  });
});
