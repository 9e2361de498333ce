import { expect } from "chai";
import { Webhook } from "standardwebhooks";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, type TestPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";
import { requirePostgres } from "../../support/db.js";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { createOutboxStore } from "../../../core/partners/webhooks/outbox-store.js";
import { createSecretBox } from "../../../core/partners/webhooks/signing.js";
import { createWebhookWorker, type WebhookWorker } from "../../../core/partners/webhooks/worker.js";
import { loadOutsideKey } from "../../../core/keys/outside-keys.js";

/** The webhook-secret key every core of this process uses (no DATA_DIR: one key per process). */
const webhookKey = () => loadOutsideKey({ name: "webhook-secret-key", setting: "WEBHOOK_SECRET_KEY" });

/** The worker's default lease (no webhookDelivery override in these stacks). */
const LEASE_MS = 60_000;

type Receiver = Awaited<ReturnType<typeof startWebhookReceiver>>;

interface EventRow {
  seq: number;
  id: string;
  delivery_state: string;
  attempts: number;
  next_attempt_at: Date;
  last_error: string | null;
}

describe("partner webhook delivery: suspension, leases and replicas", () => {
  const stacks: TestStack[] = [];
  const receivers: Receiver[] = [];
  const workers: WebhookWorker[] = [];
  afterEach(async () => {
    for (const r of receivers) r.release();
    for (const w of workers.splice(0)) await w.stop();
    for (const s of stacks.splice(0)) await s.close();
    for (const r of receivers.splice(0)) await r.close();
  });

  async function stackWith(pollMs = 0) {
    const stack = await startStack({ webhookPollMs: pollMs });
    stacks.push(stack);
    return stack;
  }

  /** A partner with its own receiver, a webhook secret and one consenting user. */
  async function partnerWithReceiver(stack: TestStack) {
    const receiver = await startWebhookReceiver();
    receivers.push(receiver);
    const partner = await createPartner(stack, { webhookUrl: receiver.url });
    const { secret } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    const { userId } = await createUserFor(stack, partner);
    return { receiver, partner, secret, userId };
  }

  /** A second replica's worker: same database and clock, its own process state. */
  async function secondWorker(stack: TestStack) {
    const box = createSecretBox(await webhookKey());
    const outbox = createOutboxStore(stack.core.db);
    // Like the stack's own worker: the receivers are on loopback.
    const worker = createWebhookWorker({ outbox, box, clock: stack.clock, logger: stack.logs.logger, pollMs: 0, allowPrivate: true });
    workers.push(worker);
    return worker;
  }

  /** n settled credits of 1..n cents: n transfer.settled events in that order. */
  async function credits(stack: TestStack, userId: string, n: number) {
    for (let i = 1; i <= n; i++) await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: BigInt(i) });
  }

  async function events(stack: TestStack, partner: TestPartner): Promise<EventRow[]> {
    const { rows } = await stack.core.db.raw(
      `SELECT seq, id, delivery_state, attempts, next_attempt_at, last_error FROM partner_events WHERE partner_id = ? ORDER BY seq`,
      [partner.partnerId],
    );
    return (rows as EventRow[]).map((r) => ({ ...r, seq: Number(r.seq), attempts: Number(r.attempts), next_attempt_at: new Date(r.next_attempt_at) }));
  }

  const ids = (receiver: Receiver) => receiver.received.map((r) => String(r.headers["webhook-id"]));

  /** Every delivery verifies with the standardwebhooks package; returns the amounts in arrival order. */
  function verifiedAmounts(receiver: Receiver, secret: string): number[] {
    const wh = new Webhook(secret);
    return receiver.received.map((r) => (wh.verify(r.body, r.headers as Record<string, string>) as { data: { amount_cents: number } }).data.amount_cents);
  }

  it("a suspension committed while a batch is due: the request on the wire finishes, nothing else is sent, the rest go out once after reactivation", async () => {
    const stack = await stackWith();
    const { receiver, partner, secret, userId } = await partnerWithReceiver(stack);
    await credits(stack, userId, 4);
    receiver.hold();
    const run = stack.core.webhooks.runOnce();
    await receiver.waitFor(1); // the first delivery is on the wire
    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.SUSPENDED });
    receiver.release();
    await run; // the worker is done with this partner
    expect(receiver.received).to.have.length(1);
    let rows = await events(stack, partner);
    expect(rows.map((r) => [r.delivery_state, r.attempts])).to.deep.equal([
      ["delivered", 1],
      ["pending", 0],
      ["pending", 0],
      ["pending", 0],
    ]);
    // Still nothing while suspended, also once every lease of that pass has run out.
    // (The clock stays within the receiver's 5-minute timestamp tolerance.)
    stack.clock.advance(LEASE_MS + 1);
    await stack.core.webhooks.runOnce();
    expect(receiver.received).to.have.length(1);

    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.ACTIVE });
    await stack.core.webhooks.runOnce();
    rows = await events(stack, partner);
    expect(ids(receiver)).to.deep.equal(rows.map((r) => r.id)); // each once, in sequence order
    expect(verifiedAmounts(receiver, secret)).to.deep.equal([1, 2, 3, 4]);
    expect(rows.every((r) => r.delivery_state === "delivered" && r.attempts === 1)).to.equal(true);
  });

  it("a suspension being committed while the next event is leased is waited for, not missed", async function () {
    // Needs a second connection holding the partner row mid-transaction; PGlite is one
    // connection, so the worker could not even run while that transaction is open.
    requirePostgres(this, "a suspension still committing needs a second connection");
    const stack = await stackWith();
    const { receiver, partner, userId } = await partnerWithReceiver(stack);
    await credits(stack, userId, 3);
    receiver.hold();
    const run = stack.core.webhooks.runOnce();
    await receiver.waitFor(1);
    const trx = await stack.core.db.transaction();
    try {
      await trx.raw(`SELECT 1 FROM partners WHERE id = ? FOR UPDATE`, [partner.partnerId]);
      await trx.raw(`UPDATE partners SET status = 'suspended' WHERE id = ?`, [partner.partnerId]);
      receiver.release();
      // The worker's next step reads the partner FOR SHARE, so it queues behind this transaction.
      for (;;) {
        const { rows } = await stack.core.db.raw(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FOR SHARE%'`,
        );
        if ((rows as { n: number }[])[0]!.n > 0) break;
        await new Promise((resolve) => setImmediate(resolve));
      }
      await trx.commit();
    } catch (err) {
      await trx.rollback();
      throw err;
    }
    await run;
    expect(receiver.received).to.have.length(1);
    expect((await events(stack, partner)).map((r) => r.delivery_state)).to.deep.equal(["delivered", "pending", "pending"]);
    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.ACTIVE });
    await stack.core.webhooks.runOnce();
    expect(receiver.received).to.have.length(3);
    expect(new Set(ids(receiver)).size).to.equal(3);
  });

  it("a URL changed between two deliveries is used for the very next one", async () => {
    const stack = await stackWith();
    const { receiver, partner, userId } = await partnerWithReceiver(stack);
    const other = await startWebhookReceiver();
    receivers.push(other);
    await credits(stack, userId, 2);
    receiver.hold();
    const run = stack.core.webhooks.runOnce();
    await receiver.waitFor(1);
    const { secret } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: other.url });
    receiver.release();
    await run;
    expect(receiver.received).to.have.length(1);
    expect(verifiedAmounts(other, secret)).to.deep.equal([2]); // new URL, new secret
  });

  it("two workers race over one partner's due events with a slow receiver: one holds the partner, the other serves other partners meanwhile", async () => {
    const stack = await stackWith();
    const slow = await partnerWithReceiver(stack);
    await credits(stack, slow.userId, 3);
    slow.receiver.hold();
    const runA = stack.core.webhooks.runOnce();
    await slow.receiver.waitFor(1);

    const fast = await partnerWithReceiver(stack);
    await credits(stack, fast.userId, 2);
    const b = await secondWorker(stack);
    await b.runOnce(); // finishes while A's request is still held
    expect(slow.receiver.received).to.have.length(1); // B never touched the slow partner
    expect(verifiedAmounts(fast.receiver, fast.secret)).to.deep.equal([1, 2]);

    slow.receiver.release();
    await runA;
    await b.runOnce();
    await stack.core.webhooks.runOnce();
    const rows = await events(stack, slow.partner);
    expect(ids(slow.receiver)).to.deep.equal(rows.map((r) => r.id)); // each once, in order
    expect(verifiedAmounts(slow.receiver, slow.secret)).to.deep.equal([1, 2, 3]);
    expect(rows.map((r) => [r.delivery_state, r.attempts])).to.deep.equal([
      ["delivered", 1],
      ["delivered", 1],
      ["delivered", 1],
    ]);
  });

  for (const late of [204, 500]) {
    it(`a worker whose lease ran out does not record its late answer (${late}) over the new holder's claim`, async () => {
      const stack = await stackWith();
      const { receiver, partner, secret, userId } = await partnerWithReceiver(stack);
      await credits(stack, userId, 1);
      receiver.hold();
      const runA = stack.core.webhooks.runOnce();
      await receiver.waitFor(1);
      // A stalls past its lease (on the shared clock); B takes the partner and the event.
      stack.clock.advance(LEASE_MS + 1);
      const b = await secondWorker(stack);
      const runB = b.runOnce();
      await receiver.waitFor(2);
      const [leased] = await events(stack, partner);
      expect(leased).to.include({ delivery_state: "pending", attempts: 2 });

      receiver.held[0]!.answer(late); // A's request comes back now
      await runA;
      const [afterA] = await events(stack, partner);
      expect(afterA).to.deep.equal(leased); // untouched: B's claim stands
      expect(stack.logs.text()).to.include("not recorded");

      receiver.held[1]!.answer(204);
      await runB;
      const [done] = await events(stack, partner);
      expect(done).to.include({ delivery_state: "delivered", attempts: 2, last_error: null });
      // Both attempts carry the event id as webhook-id, and both verify.
      expect(ids(receiver)).to.deep.equal([done!.id, done!.id]);
      expect(verifiedAmounts(receiver, secret)).to.deep.equal([1, 1]);
    });
  }

  it("two workers running at the same time over many partners deliver every event exactly once, in order per partner", async () => {
    const stack = await stackWith();
    const partners: Awaited<ReturnType<typeof partnerWithReceiver>>[] = [];
    for (let i = 0; i < 4; i++) {
      const p = await partnerWithReceiver(stack);
      await credits(stack, p.userId, 5);
      partners.push(p);
    }
    const b = await secondWorker(stack);
    const pending = async () => {
      for (const p of partners) if ((await events(stack, p.partner)).some((r) => r.delivery_state !== "delivered")) return true;
      return false;
    };
    while (await pending()) await Promise.all([stack.core.webhooks.runOnce(), b.runOnce(), stack.core.webhooks.runOnce(), b.runOnce()]);
    for (const p of partners) {
      const rows = await events(stack, p.partner);
      expect(ids(p.receiver)).to.deep.equal(rows.map((r) => r.id));
      expect(verifiedAmounts(p.receiver, p.secret)).to.deep.equal([1, 2, 3, 4, 5]);
      expect(rows.every((r) => r.attempts === 1)).to.equal(true);
    }
  });

  it("the background loop keeps serving other partners while one receiver is slow", async () => {
    const stack = await stackWith(10);
    const slow = await partnerWithReceiver(stack);
    slow.receiver.hold();
    await credits(stack, slow.userId, 2);
    await slow.receiver.waitFor(1);
    const fast = await partnerWithReceiver(stack);
    await credits(stack, fast.userId, 1);
    await fast.receiver.waitFor(1); // arrives while the slow request is still held
    expect(slow.receiver.received).to.have.length(1);
    slow.receiver.release();
    await slow.receiver.waitFor(2);
    expect(verifiedAmounts(slow.receiver, slow.secret)).to.deep.equal([1, 2]);
  });

  it("a lease shorter than the request timeout plus margin is refused at start", async () => {
    const stack = await stackWith();
    const box = createSecretBox(await webhookKey());
    const make = (leaseMs: number) => () =>
      createWebhookWorker({
        outbox: createOutboxStore(stack.core.db),
        box,
        clock: stack.clock,
        logger: stack.logs.logger,
        pollMs: 0,
        timeoutMs: 10_000,
        leaseMs,
      });
    expect(make(12_000)).to.throw(/leaseMs/);
    const ok = make(15_000)();
    await ok.stop();
  });
});
