/**
 * Issue 4: a 500-item treasury batch on real Postgres (p50/p99 and sustained items/s),
 * next to the same rows written by a bare multi-row INSERT in one transaction, in the
 * same run on the same database.
 *
 * The batch goes through the ExecuteBatch RPC over the in-process transport (the path
 * the gateway uses in one process, interceptors included): a 500-item body is over the 64 KiB HTTP limit
 * of spec 8, so no HTTP client can send one.
 */
import { randomBytes, randomUUID } from "node:crypto";
import { performance } from "node:perf_hooks";
import { createRouterTransport, type Interceptor } from "@connectrpc/connect";
import pino from "pino";
import { createCore } from "../core/core.js";
import { createCoreClients } from "../gateways/core-clients.js";
import { createInProcessTransport } from "../core/in-process-transport.js";
import { benchDatabase, fmt, median, percentile, table } from "./support.js";

const ITEMS = 500;
const RECIPIENTS = 50;
const WARMUP = 10;
const ROUNDS = 100;

export async function run(): Promise<void> {
  const scratch = await benchDatabase();
  const adminToken = randomBytes(16).toString("hex");
  const core = await createCore({
    db: { url: scratch.url, poolMax: 10 },
    logger: pino({ level: "silent" }),
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
      await gatewayClients.treasury.executeBatch(b);
    };

    // Interleave the two so drift (autovacuum, cache) hits both alike.
    for (let i = 0; i < WARMUP; i++) {
      await vaultgate();
      await bare();
    }
    const ours: number[] = [];
    const theirs: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      let t = performance.now();
      await vaultgate();
      ours.push(performance.now() - t);
      t = performance.now();
      await bare();
      theirs.push(performance.now() - t);
    }
    const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
    const itemsPerSecond = (xs: number[]) => (ITEMS * xs.length) / (sum(xs) / 1000);
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
    const ratio = itemsPerSecond(ours) / itemsPerSecond(theirs);
    console.log(`batch p50 ${fmt(median(ours))} ms (target < 50 ms); items/s ${fmt(ratio * 100)}% of the bare INSERT (target >= 50%)`);
  } finally {
    await core.close();
    await scratch.drop();
  }
}
