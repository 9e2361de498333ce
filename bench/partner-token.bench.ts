/**
 * Partner token issuance at 10 concurrent partners over HTTP (`vaultgate serve` as
 * shipped: LOG_LEVEL info, durable Postgres) in alternating rounds with the raw floor
 * (scrypt verification + ES256 signature, 10 at a time in this process); target: issuance
 * p50 <= 1.2x the floor's (median of the per-round ratios). Unknown-client vs
 * wrong-secret timing in alternating rounds; target: medians under 5% apart. Then a
 * legitimate partner's mint p50 and the partner KYC read's p99, without and with a
 * concurrent flood of wrong secrets for random client ids (64 connections), in
 * alternating rounds; targets: mint p50 <= 2x, read p99 <= 1.5x. A third kind of round
 * aims the same flood at a bare server that refuses at once, printing how much of the
 * read's p99 the machine alone loses to a flood.
 */
import { generateKeyPairSync, randomBytes, sign } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { performance } from "node:perf_hooks";
import { createSecretHasher } from "../core/secrets/hasher.js";
import { runCli, tempDataDir } from "../test/support/process.js";
import { alternate, benchDatabase, fmt, load, loadColumns, median, percentile, ROUNDS, comparisonRounds, seconds, startBenchChild, startService, table, verdict, watchLoad, inTurns, type BodyCheck, type LoadSpec, type Measurement } from "./support.js";

const PARTNERS = 10;
const TOKEN: BodyCheck = { status: 200, keys: ["access_token", "token_type", "expires_in"] };

export async function run(): Promise<void> {
  const db = await benchDatabase();
  const dir = await tempDataDir();
  // Every request comes from 127.0.0.1: the per-address failure budget would turn the
  // unknown-vs-wrong sample into 429s, so this part lifts it (the flood part below does not).
  const env = { DATABASE_URL: db.url, DATA_DIR: dir.path, TOKEN_RATE_LIMIT_PER_MINUTE: "1000000", TOKEN_FAILURES_PER_ADDRESS_PER_MINUTE: "1000000" };
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
    const cmp = await alternate("token issuance (10 partners, repeat mints, HTTP + core + Postgres) vs floor (scrypt verify + ES256 sign, 10 concurrent, no HTTP/DB)", [
      { name: "issuance", measure: () => issuance(seconds(8)) },
      { name: "floor", measure: () => measureFloor() },
    ]);
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

    // A partner that never minted: the bench partners above minted thousands of times a
    // minute under the lifted per-client limit, so their counters hold thousands of
    // attempts (each further attempt reads them all), and a success from this address
    // moved their checks into the priority lane. A prober's unknown and known ids differ
    // in neither.
    const probed = (await runCli(["partner", "create", "--name", "Bench probed"], cliEnv)).json!;
    const timing = await unknownVsWrong(url, probed.client_id as string, auth);
    table(timing.rounds.map((r, i) => ({ round: i + 1, "unknown client median ms": fmt(r.unknown, 2), "wrong secret median ms": fmt(r.wrong, 2), "difference %": fmt(r.diff * 100, 2), ...loadColumns(r.load) })));
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
  const hasher = await createSecretHasher();
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
 * Alternating sequential requests (unknown, wrong, unknown, ...), so both cases see the
 * same machine state, in ROUNDS rounds; each answer must be 401 invalid_client. One
 * unknown id against one known id, as a prober would try them: each id's attempt counter
 * then holds as many attempts as the other's.
 */
async function unknownVsWrong(url: string, knownId: string, auth: (id: string, secret: string) => string) {
  let failures = 0;
  const once = async (id: string) => {
    const t = performance.now();
    const res = await fetch(url, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded", authorization: auth(id, "gps_wrong") }, body: "grant_type=client_credentials" });
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

type FloodKind = "none" | "service" | "bare";

/** bench/bare-refuser.ts in a process of its own: a server that answers 429 at once and does nothing else. */
async function startBareRefuser(): Promise<{ url: string; stop(): Promise<void> }> {
  const child = await startBenchChild<{ port: number }>("bare-refuser");
  return { url: `http://127.0.0.1:${child.info.port}/token`, stop: () => child.stop() };
}

const FLOOD_CONNECTIONS = 64;
/** Requests per second per flood connection (64 x 4 = 256/s, about 7x what scrypt can check on 2 cores). */
const FLOOD_RATE = Number(process.env.BENCH_FLOOD_RATE ?? 4);
const FLOOD_ROUND_S = seconds(6);
/**
 * Five rounds of each kind, not three (BENCH_ROUNDS still decides when set). The verdict is
 * a p99 of 1,000-1,200 reads (the 10th-12th slowest; 200 a second for 5-6 s): one disk
 * stall of a few hundred milliseconds sets it alone (a round without a flood read 164 ms
 * at p99 beside 45-91 ms of stall in the other rounds). With three rounds one such round
 * and the ordinary spread of two 5-10 ms p99s decided the median; five need two stalled
 * rounds.
 */
const FLOOD_ROUNDS = comparisonRounds(5);
const GET_CONNECTIONS = 8;
/** KYC reads per second in all (paced, so p99 shows service time rather than a saturated closed loop). */
const GET_RATE = 200;

/**
 * A legitimate partner that minted before keeps minting (sequential, one every 50 ms) while
 * partners read KYC (paced); in alternate rounds 64 connections send wrong secrets for
 * random client ids. All from 127.0.0.1: the flood meets the per-address failure budget
 * first, the legitimate mint answers from the verified-secret cache.
 */
async function floodComparison() {
  const db = await benchDatabase();
  const dir = await tempDataDir();
  // Deployment defaults (per-address failure budget 20/min) but for the per-client token
  // counter, which the legitimate partner's 20 mints/s would otherwise meet,
  // and the KYC read's per-partner limit, which the paced reads would.
  const env = { DATABASE_URL: db.url, DATA_DIR: dir.path, TOKEN_RATE_LIMIT_PER_MINUTE: "1000000", PARTNER_RESOURCE_RATE_LIMIT_PER_MINUTE: "1000000000" };
  const service = await startService(env);
  try {
    await floodRounds(service.gatewayUrl, { ...env, CORE_URL: service.coreUrl });
  } finally {
    await service.stop();
    await db.drop();
    await dir.remove();
  }
}

async function floodRounds(gatewayUrl: string, cliEnv: Record<string, string>) {
  const p = (await runCli(["partner", "create", "--name", "Bench flood"], cliEnv)).json!;
  const clientId = p.client_id as string;
  const secret = p.client_secret as string;
  const user = (await runCli(["user", "create", "--email", `bench-${randomBytes(4).toString("hex")}@example.com`], cliEnv)).json!;
  const userId = user.user_id as string;
  await runCli(["consent", "grant", "--partner", clientId, "--user", userId], cliEnv);
  await runCli(["user", "set-kyc", userId, "--status", "approved", "--provider", "sandbox"], cliEnv);

  const tokenUrl = `${gatewayUrl}/api/partner/oauth/token`;
  const mintHeaders = { "content-type": "application/x-www-form-urlencoded", authorization: `Basic ${Buffer.from(`${clientId}:${secret}`).toString("base64")}` };
  const mintOnce = async () => {
    const t = performance.now();
    const res = await fetch(tokenUrl, { method: "POST", headers: mintHeaders, body: "grant_type=client_credentials" });
    const body = (await res.json()) as { access_token?: string };
    if (res.status !== 200 || !body.access_token) throw new Error(`legitimate mint failed: ${res.status}`);
    return { ms: performance.now() - t, token: body.access_token };
  };
  const token = (await mintOnce()).token;
  const kycUrl = `${gatewayUrl}/api/partner/users/${userId}/kyc`;
  const sample = await fetch(kycUrl, { headers: { authorization: `Bearer ${token}` } });
  const sampleBody = await sample.text();
  if (sample.status !== 200) throw new Error(`kyc read failed: ${sample.status} ${sampleBody}`);
  const kycCheck: BodyCheck = { status: 200, keys: Object.keys(JSON.parse(sampleBody) as object) };

  // Wrong secrets for random client ids. The flood is load, not a measurement, but the
  // service must still answer every one of its requests as a refusal: 401 invalid_client,
  // or 429 once the address's failure budget is spent. Anything else (a 5xx, a token, a
  // dropped connection) is a failure of the load and fails the bench.
  const flood: LoadSpec = {
    url: tokenUrl,
    method: "POST",
    connections: FLOOD_CONNECTIONS,
    rate: FLOOD_CONNECTIONS * FLOOD_RATE,
    requests: FLOOD_CONNECTIONS * FLOOD_RATE * (FLOOD_ROUND_S + 1),
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: "grant_type=client_credentials",
    requestHeaders: Array.from({ length: 1000 }, () => ({
      authorization: `Basic ${Buffer.from(`gpc_flood_${randomBytes(4).toString("hex")}:gps_${randomBytes(32).toString("base64url")}`).toString("base64")}`,
    })),
    check: { status: [401, 429] },
  };

  // The same flood aimed at a bare server in its own process that refuses each request
  // at once (429, no work): what the flood costs the reads through the machine alone
  // (its load generator, the kernel, one more process), which no change to the
  // service can remove. Printed beside the verdict, not judged.
  const bare = await startBareRefuser();
  const floodAtBare: LoadSpec = { ...flood, url: bare.url, check: { status: 429 } };

  const round = async (kind: FloodKind) => {
    const stop = { now: false };
    const flooding = kind === "service" ? load(flood) : kind === "bare" ? load(floodAtBare) : undefined;
    if (flooding) await sleep(500); // let the flood reach its pace before measuring
    const reads = load({ url: kycUrl, connections: GET_CONNECTIONS, rate: GET_RATE, requests: GET_RATE * FLOOD_ROUND_S, headers: { authorization: `Bearer ${token}` }, check: kycCheck });
    const mints: number[] = [];
    const minting = (async () => {
      while (!stop.now) {
        mints.push((await mintOnce()).ms);
        await sleep(50);
      }
    })();
    const get = await reads;
    stop.now = true;
    await minting;
    const floodResult = flooding ? await flooding : undefined;
    if (get.failures > 0) console.log(`FAILED kyc reads: ${get.failures}; e.g.\n  ${get.samples.join("\n  ")}`);
    return { mintP50: median(mints), mints: mints.length, getP99: get.p99, getRps: get.rps, failures: get.failures, flood: floodResult };
  };

  const kinds: FloodKind[] = ["none", "service", "bare"];
  const turns = await inTurns(kinds, FLOOD_ROUNDS, round).finally(() => bare.stop());
  const ran = turns.map((t) => ({ ...t.measured, kind: t.side, round: t.round, load: t.load, background: t.background }));
  const quiet = ran.filter((r) => r.kind === "none");
  const flooded = ran.filter((r) => r.kind === "service");
  const atBare = ran.filter((r) => r.kind === "bare");
  table(
    ran.map((r) => ({
      round: r.round,
      flood: { none: "no", service: "yes", bare: "at a bare server" }[r.kind],
      "mint p50 ms": fmt(r.mintP50, 2),
      "kyc p99 ms": fmt(r.getP99, 1),
      "kyc req/s": fmt(r.getRps),
      failures: r.failures,
      ...loadColumns(r.load),
      "postgres background": r.background,
    })),
  );
  const med = (rs: typeof quiet, f: (r: (typeof quiet)[number]) => number) => median(rs.map(f));
  const mintQuiet = med(quiet, (r) => r.mintP50);
  const mintFlood = med(flooded, (r) => r.mintP50);
  const getQuiet = med(quiet, (r) => r.getP99);
  const getFlood = med(flooded, (r) => r.getP99);
  // Judged like every comparison: the median of each round's own ratio (flooded / quiet).
  const mintRatios = flooded.map((r, i) => r.mintP50 / quiet[i]!.mintP50);
  const getRatios = flooded.map((r, i) => r.getP99 / quiet[i]!.getP99);
  const mintRatio = median(mintRatios);
  const getRatio = median(getRatios);
  const bareRatios = atBare.map((r, i) => r.getP99 / quiet[i]!.getP99);
  const roundsOf = (xs: number[]) => `rounds ${xs.map((x) => x.toFixed(2)).join(", ")}`;
  const codes: Record<string, number> = {};
  let floodTotal = 0;
  let floodBroken = 0;
  for (const r of atBare) {
    if (r.flood!.failures > 0) console.log(`flood at the bare server: ${r.flood!.failures} requests not answered 429 (its round measures less than a flood); e.g.\n  ${r.flood!.samples.join("\n  ")}`);
  }
  for (const r of flooded) {
    for (const [code, n] of Object.entries(r.flood!.statuses ?? {})) codes[code] = (codes[code] ?? 0) + n;
    floodTotal += r.flood!.requests;
    floodBroken += r.flood!.failures;
    if (r.flood!.failures > 0) console.log(`flood requests not refused: ${r.flood!.failures}; e.g.\n  ${r.flood!.samples.join("\n  ")}`);
  }
  console.log(`\nLegitimate partner under a flood of wrong secrets (${FLOOD_CONNECTIONS} connections x ${FLOOD_RATE}/s, random client ids), ${FLOOD_ROUNDS} rounds of ${FLOOD_ROUND_S} s, the order turning every round:`);
  table([
    { measure: "partner token mint p50 ms (sequential, cached secret)", "no flood": fmt(mintQuiet, 2), flood: fmt(mintFlood, 2), "median of round ratios": `${fmt(mintRatio, 2)}x`, target: "<= 2x" },
    { measure: `GET /users/<id>/kyc p99 ms (${GET_RATE}/s, ${GET_CONNECTIONS} connections)`, "no flood": fmt(getQuiet, 1), flood: fmt(getFlood, 1), "median of round ratios": `${fmt(getRatio, 2)}x`, target: "<= 1.5x" },
    {
      measure: "the same kyc p99 ms with the flood at a bare server instead (the machine's share)",
      "no flood": fmt(getQuiet, 1),
      flood: fmt(med(atBare, (r) => r.getP99), 1),
      "median of round ratios": `${fmt(median(bareRatios), 2)}x`,
      target: "printed, not judged",
    },
  ]);
  console.log(`kyc p99 with the flood at a bare server / without a flood: ${fmt(median(bareRatios), 2)}x (${roundsOf(bareRatios)}); printed, not judged`);
  const mix = Object.entries(codes).map(([c, n]) => `${c}: ${n}`).join(", ");
  console.log(`flood: ${floodTotal} requests over ${FLOOD_ROUNDS} rounds (${fmt(floodTotal / (FLOOD_ROUNDS * (FLOOD_ROUND_S + 1)))} /s); statuses ${mix || "none"}`);
  const readFailures = [...quiet, ...flooded].reduce((n, r) => n + r.failures, 0);
  verdict("legitimate mint p50 under a wrong-secret flood <= 2x without (median of round ratios)", `${mintRatio.toFixed(2)}x (${roundsOf(mintRatios)})`, mintRatio <= 2);
  verdict("every flood request refused with 401 or 429 (no 5xx, no token, no connection error)", `${floodBroken} of ${floodTotal} otherwise`, floodBroken === 0 && floodTotal > 0);
  verdict("KYC read p99 under a wrong-secret flood <= 1.5x without (median of round ratios)", `${getRatio.toFixed(2)}x (${roundsOf(getRatios)})`, getRatio <= 1.5 && readFailures === 0);
}
