import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { expect } from "chai";
import { Health } from "../../gen/grpc/health/v1/health_pb.js";
import { grpcCoreSuite } from "../support/grpc-core.js";

/** Calls open at once on one connection: well past Node's default of 10 listeners per signal. */
const AT_ONCE = 30;

/**
 * Every call core serves listens to its shutdown signal; many calls at once must not make Node
 * warn of a listener leak (MaxListenersExceededWarning), which would bury real leaks in the logs.
 */
describe("core's port: many calls at once", () => {
  const suite = grpcCoreSuite();

  it(`${AT_ONCE} concurrent calls emit no MaxListenersExceededWarning`, async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on("warning", onWarning);
    try {
      const transport = createGrpcTransport({ baseUrl: suite.core.server.url });
      const health = createClient(Health, transport);
      const checked = Array.from({ length: AT_ONCE }, () => health.check({ service: "" }));
      const answers = await Promise.all(checked);
      expect(answers).to.have.length(AT_ONCE);
      // A warning is emitted on the next tick after the listener that crossed the limit.
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off("warning", onWarning);
    }
    expect(warnings.map((w) => `${w.name}: ${w.message}`)).to.deep.equal([]);
  });
});
