/**
 * The partner KYC read as shipped, against the committed-INSERT ceiling through `pg` and the
 * same INSERT group-committed behind a fastify route; then info against silent logging
 * (docs/benchmarks.md).
 */
import { randomBytes } from "node:crypto";
import { createRouterTransport } from "@connectrpc/connect";
import Fastify from "fastify";
import pg from "pg";
import pino from "pino";
import { createCore } from "../core/core.js";
import { createGroupCommit } from "../core/db/group-commit.js";
import { createInProcessTransport } from "../core/in-process-transport.js";
import { ACCESS_MAX_BATCH, ACCESS_MAX_IN_FLIGHT } from "../core/partners/resources-store.js";
import { buildGateway } from "../gateways/app.js";
import { createCoreClients } from "../gateways/core-clients.js";
import { PartnerStatus } from "../gen/vaultgate/partners/v1/partners_pb.js";
import {
  alternate,
  alternateAtLevels,
  benchDatabase,
  benchLogger,
  comparisonRounds,
  fmt,
  load,
  median,
  NEAR_ONE_ROUNDS,
  percentile,
  roundRatios,
  seconds,
  verdict,
  type BodyCheck,
  type Measurement,
} from "./support.js";

/** `DATABASE_POOL_MAX`'s default (cli/config.ts): the ceiling gets the same pool. */
const POOL = 20;
const LEVELS = [10, 50];

/** The ceiling's table and its one statement: a single-row committed INSERT. */
const INSERT_TABLE = `CREATE TABLE IF NOT EXISTS bench_inserts (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, request_id text NOT NULL, at timestamptz NOT NULL)`;
/** Per-round ratios as percentages: their median, then every round. */
const percentRounds = (ratios: number[]) => `${fmt(median(ratios) * 100, 0)}% (rounds ${ratios.map((r) => `${fmt(r * 100, 0)}%`).join(", ")})`;

const insertRow = (pool: pg.Pool) => pool.query(`INSERT INTO bench_inserts (request_id, at) VALUES ($1, now())`, [randomBytes(8).toString("hex")]);

/**
 * The same rows group-committed as core commits its hot paths: what group commit alone makes of
 * the ceiling, so the rest of the difference is the read's own work.
 */
const insertBatched = (pool: pg.Pool) => {
  const batch = createGroupCommit<string, undefined>(
    async (ids) => {
      await pool.query(`INSERT INTO bench_inserts (request_id, at) SELECT unnest($1::text[]), now()`, [ids]);
      return ids.map(() => undefined);
    },
    { maxBatch: ACCESS_MAX_BATCH, maxInFlight: ACCESS_MAX_IN_FLIGHT, name: "bench_inserts" },
  );
  return () => batch(randomBytes(8).toString("hex"));
};

/** Single-row committed INSERTs through a pool of POOL connections, `connections` at a time. */
async function insertCeiling(url: string, connections: number): Promise<Measurement> {
  const pool = new pg.Pool({ connectionString: url, max: POOL });
  await pool.query(INSERT_TABLE);
  const latencies: number[] = [];
  let failures = 0;
  const samples: string[] = [];
  const ms = seconds(8) * 1000;
  const t0 = performance.now();
  const deadline = t0 + ms;
  await Promise.all(
    Array.from({ length: connections }, async () => {
      while (performance.now() < deadline) {
        const t = performance.now();
        try {
          await insertRow(pool);
          latencies.push(performance.now() - t);
        } catch (err) {
          failures++;
          if (samples.length < 5) samples.push(String(err));
        }
      }
    }),
  );
  const elapsed = (performance.now() - t0) / 1000;
  await pool.end();
  return { rps: latencies.length / elapsed, p50: percentile(latencies, 50), p99: percentile(latencies, 99), requests: latencies.length, failures, samples };
}

export async function run(): Promise<void> {
  const pgServer = await benchDatabase();
  const adminToken = randomBytes(16).toString("hex");
  const gatewayToken = randomBytes(16).toString("hex");
  const core = await createCore({
    db: { url: pgServer.url, poolMax: POOL },
    logger: benchLogger("partner-resources-core"),
    adminToken,
    gatewayToken,
    issuer: "http://127.0.0.1",
    partnerAudience: "urn:vaultgate:partner-api",
    webhookPollMs: 0,
    // The shipped per-partner limit would answer most of a saturating load with 429.
    resourceRateLimits: { default: 1_000_000_000 },
  });
  // The gateway's transport as `vaultgate serve` wires it in one process.
  const transport = createInProcessTransport(core.routes, core.interceptors);
  const admin = createCoreClients(
    createRouterTransport(core.routes, {
      router: { interceptors: core.interceptors },
      transport: {
        interceptors: [
          (next) => (req) => {
            req.header.set("authorization", `Bearer ${adminToken}`);
            return next(req);
          },
        ],
      },
    }),
  );
  const clients = createCoreClients(transport, { gatewayToken });
  const gateway = await buildGateway({ clients, logger: benchLogger("partner-resources-gateway") });
  const silentGateway = await buildGateway({ clients, logger: pino({ level: "silent" }) });
  const bare = Fastify();
  // The INSERT ceiling behind HTTP: the same single-row committed INSERT per request, on
  // the same pool size, answered by a bare fastify route with the same JSON and driven by
  // the same load generator, so both sides pay for HTTP and the load generator.
  const insertOverHttp = Fastify();
  const batchedOverHttp = Fastify();
  const insertPool = new pg.Pool({ connectionString: pgServer.url, max: POOL });
  const urlOf = (app: { server: { address(): unknown } }) => `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  try {
    await gateway.listen({ port: 0, host: "127.0.0.1" });
    await silentGateway.listen({ port: 0, host: "127.0.0.1" });
    const created = await admin.partners.createPartner({ name: "Bench", slug: `bench-${randomBytes(3).toString("hex")}`, status: PartnerStatus.ACTIVE });
    const partner = created.partner!;
    const { userId } = await admin.partners.createUser({ email: `bench-${randomBytes(4).toString("hex")}@example.com` });
    await admin.partnerResources.grantConsent({ clientId: partner.clientId, userId });
    await admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "sandbox" });
    const token = await admin.partners.issueToken({ clientId: partner.clientId, clientSecret: created.clientSecret });

    const path = `/api/partner/users/${userId}/kyc`;
    const headers = { authorization: `Bearer ${token.accessToken}` };
    const sample = await fetch(`${urlOf(gateway)}${path}`, { headers });
    const sampleBody = await sample.text();
    if (sample.status !== 200) throw new Error(`warm-up failed: ${sample.status} ${sampleBody}`);
    // Every response must carry the fields of a good answer.
    const check: BodyCheck = { status: 200, keys: Object.keys(JSON.parse(sampleBody) as object) };
    console.log(`expected shape: ${JSON.stringify(check)}`);
    bare.get(path, async (_req, reply) => reply.type("application/json").send(sampleBody));
    await bare.listen({ port: 0, host: "127.0.0.1" });
    await insertPool.query(INSERT_TABLE);
    insertOverHttp.get(path, async (_req, reply) => {
      await insertRow(insertPool);
      return reply.type("application/json").send(sampleBody);
    });
    await insertOverHttp.listen({ port: 0, host: "127.0.0.1" });
    const insertInBatch = insertBatched(insertPool);
    batchedOverHttp.get(path, async (_req, reply) => {
      await insertInBatch();
      return reply.type("application/json").send(sampleBody);
    });
    await batchedOverHttp.listen({ port: 0, host: "127.0.0.1" });

    const kyc = (base: string, connections: number) => () => load({ url: `${base}${path}`, headers, connections, check, server: process.pid });
    await kyc(urlOf(gateway), 10)(); // warm-up: JIT, pools

    const vsInsert = await alternateAtLevels("GET /users/<id>/kyc vs single-row INSERT ceiling", LEVELS, (connections) => [
      { name: "GET kyc (info log)", measure: kyc(urlOf(gateway), connections) },
      { name: `INSERT through pg, pool ${POOL}`, measure: () => insertCeiling(pgServer.url, connections) },
    ]);
    const logging = await alternate(
      "GET /users/<id>/kyc, gateway log level info vs silent, 50 connections",
      [
        { name: "info", measure: kyc(urlOf(gateway), 50) },
        { name: "silent", measure: kyc(urlOf(silentGateway), 50) },
      ],
      NEAR_ONE_ROUNDS,
    );
    const vsInsertOverHttp = await alternate(
      "GET /users/<id>/kyc vs the INSERT behind HTTP, group-committed (judged) and one per request (fastify routes, same JSON, same load generator), 50 connections",
      [
        { name: "GET kyc (info log)", measure: kyc(urlOf(gateway), 50) },
        { name: `group-committed INSERT over HTTP, pool ${POOL}`, measure: kyc(urlOf(batchedOverHttp), 50) },
        { name: `INSERT per request over HTTP, pool ${POOL}`, measure: kyc(urlOf(insertOverHttp), 50) },
      ],
      comparisonRounds(5),
    );
    const fastifyBare = await alternate(
      "ceiling: bare fastify, same JSON, 50 connections (printed, not judged)",
      [{ name: "bare fastify", measure: () => load({ url: `${urlOf(bare)}${path}`, connections: 50, check, server: process.pid }) }],
      1,
    );

    const at50 = vsInsert.perLevel.find((l) => l.connections === 50)!.result;
    const ours50 = at50.sides[0]!;
    console.log(`\nbare fastify: ${fmt(fastifyBare.sides[0]!.rps)} req/s`);
    const [ownKyc, , perRequest] = vsInsertOverHttp.sides;
    console.log(`kyc / one INSERT per request behind HTTP: ${percentRounds(roundRatios(ownKyc!, perRequest!))}; printed, not judged`);
    const pctRounds = percentRounds(at50.ratios);
    verdict(
      "kyc >= 60% of the INSERT ceiling at 50 connections, pool 20 (floor; median of per-round ratios)",
      pctRounds,
      at50.ratio >= 0.6 && at50.failures === 0,
    );
    verdict(
      "kyc >= 95% of the group-committed INSERT route behind HTTP at 50 connections (median of per-round ratios)",
      percentRounds(vsInsertOverHttp.ratios),
      vsInsertOverHttp.ratio >= 0.95 && vsInsertOverHttp.failures === 0,
    );
    verdict("kyc p99 < 25 ms at 50 connections", `${fmt(ours50.p99, 1)} ms`, ours50.p99 < 25 && ours50.failures === 0);
    verdict("info logging costs < 10% of kyc throughput (info/silent >= 0.90x)", `${fmt(logging.ratio, 2)}x`, logging.ratio >= 0.9 && logging.failures === 0);
    verdict(
      "no failed responses",
      `${vsInsert.failures + logging.failures + vsInsertOverHttp.failures}`,
      vsInsert.failures + logging.failures + vsInsertOverHttp.failures === 0,
    );
  } finally {
    await bare.close();
    await insertOverHttp.close();
    await batchedOverHttp.close();
    await insertPool.end();
    await gateway.close();
    await silentGateway.close();
    await core.close();
    await pgServer.drop();
  }
}
