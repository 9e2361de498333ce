/**
 * DESIGN 7: what one gateway -> core call costs, in process (router transport, target
 * under 50 us) and split (gRPC over h2c), for a trivial RPC so only the hop is measured.
 */
import { performance } from "node:perf_hooks";
import { createClient, createRouterTransport, type ConnectRouter } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health, HealthCheckResponse_ServingStatus } from "../gen/grpc/health/v1/health_pb.js";
import { startCoreServer } from "../core/server.js";
import { createInProcessTransport } from "../core/in-process-transport.js";
import { fmt, table } from "./support.js";

const routes = (router: ConnectRouter) => {
  router.service(Health, { check: () => ({ status: HealthCheckResponse_ServingStatus.SERVING }) });
};

async function perCall(call: () => Promise<unknown>, n: number, concurrency: number) {
  for (let i = 0; i < 200; i++) await call();
  const started = performance.now();
  let left = n;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (left-- > 0) await call();
    }),
  );
  const ms = performance.now() - started;
  return { usPerCall: (ms * 1000) / n, callsPerSecond: n / (ms / 1000) };
}

export async function run(): Promise<void> {
  const direct = createClient(Health, createInProcessTransport(routes, []));
  const router = createClient(Health, createRouterTransport(routes));
  const server = await startCoreServer({ routes, interceptors: [] }, 0);
  const split = createClient(Health, createGrpcTransport({ baseUrl: server.url }));
  try {
    const rows = [];
    for (const [label, client] of [["in-process direct transport (what serve uses)", direct], ["in-process createRouterTransport", router], ["gRPC over h2c (split)", split]] as const) {
      for (const concurrency of [1, 10]) {
        const r = await perCall(() => client.check({ service: "" }), label.startsWith("in") ? 20_000 : 5_000, concurrency);
        rows.push({ hop: label, concurrency, "us/call": fmt(r.usPerCall), "calls/s": Math.round(r.callsPerSecond) });
      }
    }
    table(rows);
    console.log("target: in-process under 50 us per call");
  } finally {
    await server.close();
  }
}
