/**
 * What one gateway -> core call costs, in process (the direct transport `vaultgate serve`
 * uses; target under 50 us) and split (gRPC over h2c), for a trivial RPC so only the hop
 * is measured. Each row is the median of ROUNDS runs, with the machine's load printed.
 */
import { performance } from "node:perf_hooks";
import { createClient, createRouterTransport, type ConnectRouter } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health, HealthCheckResponse_ServingStatus } from "../gen/grpc/health/v1/health_pb.js";
import { startCoreServer } from "../core/server.js";
import { createInProcessTransport } from "../core/in-process-transport.js";
import { fmt, loadColumns, median, ROUNDS, table, verdict, watchLoad } from "./support.js";

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
    let directWorst = 0;
    for (const [label, client] of [
      ["in-process direct transport (what serve uses)", direct],
      ["in-process createRouterTransport", router],
      ["gRPC over h2c (split)", split],
    ] as const) {
      for (const concurrency of [1, 10]) {
        const runs = [];
        const stop = watchLoad();
        for (let r = 0; r < ROUNDS; r++) runs.push(await perCall(() => client.check({ service: "" }), label.startsWith("in") ? 20_000 : 5_000, concurrency));
        const load = stop();
        const us = median(runs.map((r) => r.usPerCall));
        if (client === direct) directWorst = Math.max(directWorst, us);
        rows.push({ hop: label, concurrency, "us/call": fmt(us), "runs us/call": runs.map((r) => fmt(r.usPerCall)).join(", "), ...loadColumns(load) });
      }
    }
    table(rows);
    verdict("in-process hop (direct transport) < 50 us per call, at 1 and 10 concurrent", `${fmt(directWorst)} us`, directWorst < 50);
  } finally {
    await server.close();
  }
}
