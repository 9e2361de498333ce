/**
 * Issue 2: partner token issuance at 10 concurrent partners on real Postgres, next to
 * the raw floor (scrypt verification + ES256 signature) measured in the same run, and
 * unknown-client vs wrong-secret timing.
 */
import { generateKeyPairSync, sign } from "node:crypto";
import { performance } from "node:perf_hooks";
import { createSecretHasher } from "../core/partners/credentials.js";
import { runCli, startServiceProcess, tempDataDir } from "../test/support/process.js";
import { benchDatabase, fmt, load, median, percentile, table } from "./support.js";

const PARTNERS = 10;

export async function run(): Promise<void> {
  const db = await benchDatabase();
  const dir = await tempDataDir();
  const env = { DATABASE_URL: db.url, DATA_DIR: dir.path, LOG_LEVEL: "info", TOKEN_RATE_LIMIT_PER_MINUTE: "1000000" };
  const service = await startServiceProcess("all", env);
  try {
    const cliEnv = { ...env, CORE_URL: service.coreUrl! };
    const partners: { id: string; secret: string }[] = [];
    for (let i = 0; i < PARTNERS; i++) {
      const p = (await runCli(["partner", "create", "--name", `Bench ${i}`], cliEnv)).json!;
      partners.push({ id: p.client_id as string, secret: p.client_secret as string });
    }
    const url = `${service.gatewayUrl}/api/partner/oauth/token`;
    const auth = (id: string, secret: string) => `Basic ${Buffer.from(`${id}:${secret}`).toString("base64")}`;

    // Warm up connections, JIT and the partner rows.
    await load({ url, method: "POST", connections: PARTNERS, duration: 2, ...perConnection(partners, auth) });
    const issuance = await load({ url, method: "POST", connections: PARTNERS, duration: 10, ...perConnection(partners, auth) });

    const floor = await measureFloor();
    table([
      { measure: "token issuance, 10 partners (HTTP + core + Postgres)", "req/s": fmt(issuance.rps), "p50 ms": issuance.p50, "p99 ms": issuance.p99, non2xx: issuance.non2xx },
      { measure: "floor: scrypt verify + ES256 sign, 10 concurrent, no HTTP/DB", "req/s": fmt(floor.concurrentRps), "p50 ms": fmt(floor.concurrentP50), "p99 ms": fmt(floor.concurrentP99), non2xx: 0 },
      { measure: "floor: one scrypt verify + one ES256 sign, alone", "req/s": fmt(1000 / floor.singleMs), "p50 ms": fmt(floor.singleMs), "p99 ms": "", non2xx: 0 },
    ]);
    console.log(`p50 ratio to the same-concurrency floor: ${fmt(issuance.p50 / floor.concurrentP50, 2)}x (target <= 1.2x)`);

    const timing = await unknownVsWrong(url, partners[0]!.id, auth);
    table([
      { case: "unknown client", "median ms": fmt(timing.unknown, 2) },
      { case: "wrong secret", "median ms": fmt(timing.wrong, 2) },
    ]);
    console.log(`difference: ${fmt((Math.abs(timing.unknown - timing.wrong) / Math.min(timing.unknown, timing.wrong)) * 100, 2)}% (target < 5%)`);
  } finally {
    await service.stop();
    await db.drop();
    await dir.remove();
  }
}

function perConnection(partners: { id: string; secret: string }[], auth: (id: string, secret: string) => string) {
  let next = 0;
  return {
    setupClient(client: { setHeadersAndBody(h: Record<string, string>, b: string): void }) {
      const p = partners[next++ % partners.length]!;
      client.setHeadersAndBody({ "content-type": "application/x-www-form-urlencoded", authorization: auth(p.id, p.secret) }, "grant_type=client_credentials");
    },
  };
}

/** The unavoidable work of one issuance, measured in this process: alone and 10 at a time. */
async function measureFloor() {
  const hasher = await createSecretHasher();
  const stored = await hasher.hash("gps_bench-secret");
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const once = async () => {
    await hasher.verify("gps_bench-secret", stored);
    sign("sha256", Buffer.from("header.payload"), { key: privateKey, dsaEncoding: "ieee-p1363" });
  };
  for (let i = 0; i < 5; i++) await once();
  const single: number[] = [];
  for (let i = 0; i < 30; i++) {
    const t = performance.now();
    await once();
    single.push(performance.now() - t);
  }
  const latencies: number[] = [];
  const started = performance.now();
  await Promise.all(
    Array.from({ length: PARTNERS }, async () => {
      for (let i = 0; i < 20; i++) {
        const t = performance.now();
        await once();
        latencies.push(performance.now() - t);
      }
    }),
  );
  const elapsed = (performance.now() - started) / 1000;
  return { singleMs: median(single), concurrentP50: median(latencies), concurrentP99: percentile(latencies, 99), concurrentRps: latencies.length / elapsed };
}

/** Alternating sequential requests, so both cases see the same machine state. */
async function unknownVsWrong(url: string, knownId: string, auth: (id: string, secret: string) => string) {
  const unknown: number[] = [];
  const wrong: number[] = [];
  const once = async (id: string) => {
    const t = performance.now();
    const res = await fetch(url, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded", authorization: auth(id, "gps_wrong") }, body: "grant_type=client_credentials" });
    await res.arrayBuffer();
    return performance.now() - t;
  };
  for (let i = 0; i < 10; i++) await once(knownId);
  for (let i = 0; i < 150; i++) {
    unknown.push(await once(`gpc_unknown_${(i % 16).toString(16).padStart(8, "0")}`));
    wrong.push(await once(knownId));
  }
  return { unknown: median(unknown), wrong: median(wrong) };
}
