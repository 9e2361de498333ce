/**
 * A 500-item treasury batch against a bare multi-row INSERT of the same rows, in alternating
 * rounds. It goes through the in-process ExecuteBatch transport because such a body exceeds
 * the HTTP body limit.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import { createRouterTransport, type Interceptor } from "@connectrpc/connect";
import { createCore } from "../core/core.js";
import { createCoreClients } from "../gateways/core-clients.js";
import { createInProcessTransport } from "../core/in-process-transport.js";
import { benchDatabase, benchLogger, fmt, loadColumns, median, percentile, QUICK, ROUNDS, table, verdict, watchLoad, type Load } from "./support.js";

const ITEMS = 500;
const RECIPIENTS = 50;
const WARMUP = 10;
/** Batches of each kind per round. */
const PER_ROUND = QUICK ? 10 : 35;

export async function run(): Promise<void> {
  const scratch = await benchDatabase();
  const adminToken = randomBytes(16).toString("hex");
  const core = await createCore({
    db: { url: scratch.url, poolMax: 10 },
    logger: benchLogger("treasury-core"),
    adminToken,
    issuer: "http://vaultgate.bench",
    partnerAudience: "urn:vaultgate:partner-api",
  });
  try {
    const auth: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${adminToken}`);
      return next(req);
    };
    const clients = createCoreClients(createRouterTransport(core.routes, { router: { interceptors: core.interceptors }, transport: { interceptors: [auth] } }));
    const created = await clients.partners.createPartner({ name: "Bench Treasury", slug: "bench-treasury", entitlements: { scopes: ["treasury:write"] } });
    const partner = created.partner!;
    const payer = randomUUID();
    await clients.treasury.bindTreasury({ clientId: partner.clientId, payerEntityId: payer, balanceCents: BigInt(Number.MAX_SAFE_INTEGER) - 1n });
    const users: string[] = [];
    for (let i = 0; i < RECIPIENTS; i++) {
      const { userId } = await clients.partners.createUser({ email: `bench-${i}-${randomUUID()}@example.test` });
      await clients.partnerResources.grantConsent({ clientId: partner.clientId, userId, scopes: { scopes: ["payouts:receive"] } });
      users.push(userId);
    }
    const { accessToken } = await clients.partners.issueToken({ clientId: partner.clientId, clientSecret: created.clientSecret });
    const batch = () => ({
      accessToken,
      idempotencyKey: randomUUID(),
      payerEntityId: payer,
      items: Array.from({ length: ITEMS }, (_, i) => ({
        executionId: randomUUID(),
        payoutId: randomUUID(),
        recipientUserId: users[i % RECIPIENTS]!,
        amountCents: BigInt(100 + i),
        currency: "USD",
        reference: `bench payout ${i}`,
      })),
    });

    // The ceiling: the same 500 rows, one multi-row INSERT in one transaction, no checks.
    await core.db.raw(`CREATE TABLE bench_bare_executions (LIKE treasury_executions INCLUDING ALL)`);
    const bare = async () => {
      const b = batch();
      const at = new Date();
      const batchId = randomUUID();
      await core.db.transaction(async (trx) => {
        await trx("bench_bare_executions").insert(
          b.items.map((i) => ({
            partner_id: partner.partnerId,
            execution_id: i.executionId,
            payout_id: i.payoutId,
            batch_id: batchId,
            recipient_user_id: i.recipientUserId,
            payer_entity_id: payer,
            amount_cents: Number(i.amountCents),
            currency: i.currency,
            reference: i.reference,
            executed_at: at,
          })),
        );
      });
    };
    // What the gateway uses in one process (`vaultgate serve`).
    const gatewayClients = createCoreClients(createInProcessTransport(core.routes, core.interceptors));
    const vaultgate = async () => {
      const b = batch();
      const res = await gatewayClients.treasury.executeBatch(b);
      // The answer must account for every item.
      if (res.replayed || res.batch?.items.length !== ITEMS)
        throw new Error(`ExecuteBatch answered ${res.batch?.items.length} items (replayed ${res.replayed}), want ${ITEMS} new`);
    };

    // Interleave the two so drift (autovacuum, cache) hits both alike.
    for (let i = 0; i < WARMUP; i++) {
      await vaultgate();
      await bare();
    }
    const ours: number[] = [];
    const theirs: number[] = [];
    const rounds: { ours: number[]; theirs: number[]; load: Load }[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      const round = { ours: [] as number[], theirs: [] as number[], load: undefined as unknown as Load };
      const stop = watchLoad();
      for (let i = 0; i < PER_ROUND; i++) {
        let t = performance.now();
        await vaultgate();
        round.ours.push(performance.now() - t);
        t = performance.now();
        await bare();
        round.theirs.push(performance.now() - t);
      }
      round.load = stop();
      rounds.push(round);
      ours.push(...round.ours);
      theirs.push(...round.theirs);
    }
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    const itemsPerSecond = (xs: number[]) => (ITEMS * xs.length) / (sum(xs) / 1000);
    console.log(`${ROUNDS} round(s) of ${PER_ROUND} ExecuteBatch calls interleaved with ${PER_ROUND} bare INSERTs:`);
    table(
      rounds.map((r, i) => ({
        round: i + 1,
        "ExecuteBatch p50 ms": fmt(median(r.ours)),
        "bare p50 ms": fmt(median(r.theirs)),
        "items/s % of bare": fmt((itemsPerSecond(r.ours) / itemsPerSecond(r.theirs)) * 100),
        ...loadColumns(r.load),
      })),
    );
    table([
      {
        measure: `ExecuteBatch, ${ITEMS} items (all checks, lock, audit)`,
        "p50 ms": fmt(median(ours)),
        "p99 ms": fmt(percentile(ours, 99)),
        "items/s": Math.round(itemsPerSecond(ours)),
      },
      {
        measure: `bare multi-row INSERT of the same ${ITEMS} rows, one transaction`,
        "p50 ms": fmt(median(theirs)),
        "p99 ms": fmt(percentile(theirs, 99)),
        "items/s": Math.round(itemsPerSecond(theirs)),
      },
    ]);
    const ratios = rounds.map((r) => itemsPerSecond(r.ours) / itemsPerSecond(r.theirs));
    const ratio = median(ratios);
    verdict("500-item batch p50 < 50 ms", `${fmt(median(ours))} ms`, median(ours) < 50);
    verdict(
      "batch items/s >= 50% of a bare multi-row INSERT (median of rounds)",
      `${fmt(ratio * 100)}% (rounds ${ratios.map((x) => `${fmt(x * 100)}%`).join(", ")})`,
      ratio >= 0.5,
    );
  } finally {
    await core.close();
    await scratch.drop();
  }
}
