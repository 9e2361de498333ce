/**
 * Partner token issuance against the raw floor (scrypt + ES256 in process), unknown-client vs
 * wrong-secret timing, and honest minting and reads under a flood of wrong secrets
 * (bench/partner-token-flood.ts); targets in docs/benchmarks.md.
 */
import { generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { performance } from "node:perf_hooks";
import { floodComparison } from "./partner-token-flood.js";
import { createSecretHasher } from "../core/secrets/hasher.js";
import { runCli, tempDataDir } from "../test/support/process.js";
import {
  alternate,
  benchDatabase,
  fmt,
  load,
  loadColumns,
  median,
  percentile,
  ROUNDS,
  seconds,
  startService,
  table,
  verdict,
  watchLoad,
  type BodyCheck,
  type Measurement,
} from "./support.js";

const PARTNERS = 10;
const TOKEN: BodyCheck = { status: 200, keys: ["access_token", "token_type", "expires_in"] };

export async function run(): Promise<void> {
  const db = await benchDatabase();
  const dir = await tempDataDir();
  // The per-client counter lifted: the bench partners mint thousands of times a minute.
  const env = { DATABASE_URL: db.url, DATA_DIR: dir.path, TOKEN_RATE_LIMIT_PER_MINUTE: "1000000" };
  const service = await startService(env);
  try {
    const cliEnv = { ...env, CORE_URL: service.coreUrl };
    const partners: { id: string; secret: string }[] = [];
    for (let i = 0; i < PARTNERS; i++) {
      const p = (await runCli(["partner", "create", "--name", `Bench ${i}`], cliEnv)).json!;
      partners.push({ id: p.client_id as string, secret: p.client_secret as string });
    }
    const url = `${service.gatewayUrl}/api/partner/oauth/token`;
    const auth = (id: string, secret: string) => `Basic ${Buffer.from(`${id}:${secret}`).toString("base64")}`;
    const issuance = (s: number) =>
      load({
        url,
        method: "POST",
        connections: PARTNERS,
        seconds: s,
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "grant_type=client_credentials",
        connectionHeaders: partners.map((p) => ({ authorization: auth(p.id, p.secret) })),
        check: TOKEN,
      });

    await issuance(2); // warm-up: connections, JIT, the partner rows
    const cmp = await alternate(
      "token issuance (10 partners, repeat mints, HTTP + core + Postgres) vs floor (scrypt verify + ES256 sign, 10 concurrent, no HTTP/DB)",
      [
        { name: "issuance", measure: () => issuance(seconds(8)) },
        { name: "floor", measure: () => measureFloor() },
      ],
    );
    const p50Ratios = cmp.sides[0]!.rounds.map((r, i) => r.p50 / cmp.sides[1]!.rounds[i]!.p50);
    const p50Ratio = median(p50Ratios);
    const single = await measureSingle();
    console.log(`floor alone (one scrypt verify + one ES256 sign, sequential): ${fmt(single, 2)} ms`);
    // Repeat mints present a secret that already verified, so they skip scrypt (the
    // verified-secret cache): the floor is what a first mint of a secret pays.
    verdict(
      "issuance p50 <= 1.2x the same-concurrency floor's (repeat mints skip the floor's scrypt)",
      `${p50Ratio.toFixed(2)}x (rounds ${p50Ratios.map((r) => r.toFixed(2)).join(", ")}; p50 ${cmp.sides[0]!.p50} ms vs ${fmt(cmp.sides[1]!.p50, 1)} ms)`,
      p50Ratio <= 1.2 && cmp.failures === 0,
    );

    // A partner that never minted: the bench partners' counters hold thousands of attempts,
    // which every further attempt reads, so they would skew the timing.
    const probed = (await runCli(["partner", "create", "--name", "Bench probed"], cliEnv)).json!;
    const timing = await unknownVsWrong(url, probed.client_id as string, auth);
    table(
      timing.rounds.map((r, i) => ({
        round: i + 1,
        "unknown client median ms": fmt(r.unknown, 2),
        "wrong secret median ms": fmt(r.wrong, 2),
        "difference %": fmt(r.diff * 100, 2),
        ...loadColumns(r.load),
      })),
    );
    const diff = median(timing.rounds.map((r) => r.diff));
    verdict("unknown client vs wrong secret: medians < 5% apart (median over rounds)", `${fmt(diff * 100, 2)}%`, diff < 0.05 && timing.failures === 0);
  } finally {
    await service.stop();
    await db.drop();
    await dir.remove();
  }
  await floodComparison();
}

/** The unavoidable work of one issuance: one scrypt verification and one ES256 signature. */
async function floorWork() {
  // Measures the derivation's cost, not the gate: on a busy machine the default wait bound
  // would shed the floor's own checks and end the bench.
  const hasher = await createSecretHasher({ maxWaitMs: 600_000, maxPerFlow: PARTNERS });
  const stored = await hasher.hash("gps_bench-secret");
  const { privateKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
  const once = async () => {
    await hasher.verify("gps_bench-secret", stored);
    sign("sha256", Buffer.from("header.payload"), { key: privateKey, dsaEncoding: "ieee-p1363" });
  };
  for (let i = 0; i < 5; i++) await once();
  return once;
}

/** One floor operation at a time: the median of 30. */
async function measureSingle(): Promise<number> {
  const once = await floorWork();
  const single: number[] = [];
  for (let i = 0; i < 30; i++) {
    const t = performance.now();
    await once();
    single.push(performance.now() - t);
  }
  return median(single);
}

/** The floor 10 at a time (in this process, no HTTP or database). */
async function measureFloor(): Promise<Measurement> {
  const once = await floorWork();
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
  return { rps: latencies.length / elapsed, p50: median(latencies), p99: percentile(latencies, 99), requests: latencies.length, failures: 0, samples: [] };
}

/**
 * Alternating unknown and known-id requests so both see the same machine state; one id of
 * each, as a prober would, so both attempt counters grow alike. Each answer must be a 401.
 */
async function unknownVsWrong(url: string, knownId: string, auth: (id: string, secret: string) => string) {
  let failures = 0;
  const once = async (id: string) => {
    const t = performance.now();
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", authorization: auth(id, "gps_wrong") },
      body: "grant_type=client_credentials",
    });
    const body = await res.text();
    const ms = performance.now() - t;
    if (res.status !== 401 || !body.includes("invalid_client")) {
      failures++;
      if (failures <= 5) console.log(`FAILED RESPONSE (want 401 invalid_client): ${res.status} ${body.slice(0, 200)}`);
    }
    return ms;
  };
  const unknownId = `gpc_unknown_${randomBytes(4).toString("hex")}`;
  for (let i = 0; i < 10; i++) {
    await once(unknownId);
    await once(knownId);
  }
  const rounds = [];
  for (let round = 0; round < ROUNDS; round++) {
    const unknown: number[] = [];
    const wrong: number[] = [];
    const stop = watchLoad();
    for (let i = 0; i < 100; i++) {
      unknown.push(await once(unknownId));
      wrong.push(await once(knownId));
    }
    const u = median(unknown);
    const w = median(wrong);
    rounds.push({ unknown: u, wrong: w, diff: Math.abs(u - w) / Math.min(u, w), load: stop() });
  }
  return { rounds, failures };
}
