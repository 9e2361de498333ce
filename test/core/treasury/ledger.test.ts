import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { ItemStatus } from "../../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { accountId } from "../../../core/ledger/accounts.js";
import { payoutTransferId } from "../../../core/ledger/treasury.js";
import { feedsSettled, requirePostgres } from "../../support/db.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { batchRequest, bindTreasury, createRecipient, grantConsent, withToken, type BatchRequestInit, type TreasuryPartner } from "../../support/treasury.js";
import { expectLedgerVerified } from "../../support/ledger.js";
import { expectInternalError, expectRefused, reasonOf } from "../../support/refusals.js";

/** Treasury money in the ledger: fund/bind against external:funding, a batch one payout transaction; VerifyLedger after each step. */
describe("treasury movements in the ledger", () => {
  let stack: TestStack;
  /** Reads recipients' transfers (ListTransfers) as a partner they let do so. */
  let reader: TreasuryPartner;
  /** Set to make the next batch fail inside its transaction, after every write (the fault seam). */
  let failNextBatch = false;
  let failedBatchId: string | undefined;
  let auditDown = false;
  before(async () => {
    stack = await startStack({
      treasuryFaults: {
        beforeCommit: async (batchId) => {
          if (!failNextBatch) return;
          failNextBatch = false;
          failedBatchId = batchId;
          throw new Error("injected failure before commit");
        },
      },
      auditFaults: { appendFault: () => (auditDown ? new Error("injected audit fault") : undefined) },
    });
    reader = await withToken(stack.clients, await createPartner(stack, { entitlements: ["transfers:read"] }));
  });
  after(() => stack.close());
  afterEach(() => {
    failNextBatch = false;
    auditDown = false;
  });

  const sql = async <T>(query: string, bindings: unknown[] = []): Promise<T[]> => (await stack.core.db.raw(query, bindings as never)).rows as T[];

  const expectBooksBalanced = () => expectLedgerVerified(stack);

  /** The sum of an account's postings. */
  async function posted(kind: "treasury" | "user", owner: string, currency = "USD"): Promise<number> {
    const [row] = await sql<{ total: string }>(`SELECT coalesce(sum(amount_cents), 0)::text AS total FROM ledger_postings WHERE account_id = ?`, [
      accountId(kind, owner.toLowerCase(), currency),
    ]);
    return Number(row!.total);
  }

  /** The movements recorded against this treasury by fund and bind, oldest first (by their first leg: the test clock stands still). */
  async function treasuryMovements(partnerId: string) {
    return sql<{ id: string; kind: string }>(
      `SELECT id, kind FROM ledger_transactions t WHERE reference = ? ORDER BY (SELECT min(seq) FROM ledger_postings p WHERE p.transaction_id = t.id)`,
      [`treasury:${partnerId}`],
    );
  }

  async function legsOf(transactionId: string) {
    return sql<{ account_id: string; amount_cents: string; currency: string }>(
      `SELECT account_id, amount_cents::text, currency FROM ledger_postings WHERE transaction_id = ? ORDER BY seq`,
      [transactionId],
    ).then((rows) => rows.map((r) => ({ account: r.account_id, cents: Number(r.amount_cents), currency: r.currency })));
  }

  /** The users' transfers as a partner reads them (ListTransfers), in feed order per user. */
  async function transfersOf(users: string[]) {
    const out: { userId: string; transferId: string; direction: string; amountCents: bigint; currency: string; status: string }[] = [];
    await feedsSettled(stack.core.db); // the feed holds back rows another database's open transaction could precede
    for (const userId of users) {
      await grantConsent(stack.admin, reader, userId, ["transfers:read"]);
      const res = await stack.clients.partnerResources.listTransfers({ accessToken: reader.token, userId, page: { limit: 100 } });
      expect(res.nextCursor, "one page holds them all").to.equal("");
      out.push(
        ...res.data.map((t) => ({
          userId,
          transferId: t.transferId,
          direction: t.direction,
          amountCents: t.amountCents,
          currency: t.currency,
          status: t.status,
        })),
      );
    }
    return out;
  }

  /** What the ledger holds of a partner's payouts: transactions, postings, the recipients' transfers and the payer's events. */
  async function footprint(partner: TreasuryPartner, users: string[]) {
    const [row] = await sql<{ txs: number; legs: number; events: number }>(
      `SELECT (SELECT count(*)::int FROM ledger_transactions t JOIN treasury_batches b ON b.id = t.id WHERE b.partner_id = ?) AS txs,
              (SELECT count(*)::int FROM ledger_postings p JOIN treasury_batches b ON b.id = p.transaction_id WHERE b.partner_id = ?) AS legs,
              (SELECT count(*)::int FROM partner_events WHERE partner_id = ?) AS events`,
      [partner.partnerId, partner.partnerId, partner.partnerId],
    );
    return { txs: row!.txs, legs: row!.legs, entries: (await transfersOf(users)).length, events: row!.events };
  }

  const balanceOf = async (p: TreasuryPartner) => Number((await stack.clients.treasury.getTreasury({ accessToken: p.token })).treasury!.availableCents);

  async function setup(balanceCents = 10_000n) {
    const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["treasury:write", "transfers:read"] }));
    const payer = await bindTreasury(stack.admin, partner, { balanceCents });
    const user = await createRecipient(stack.admin, partner);
    return { partner, payer, user };
  }

  it("fund, bind, rebind (up, down, unchanged, into another currency and back) keep the treasury's account equal to its balance", async () => {
    const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["treasury:write"] }));
    const payer = await bindTreasury(stack.admin, partner, { balanceCents: 10_000n });
    const user = await createRecipient(stack.admin, partner);
    const bind = (balanceCents: bigint, currency = "USD") =>
      stack.admin.treasury.bindTreasury({ clientId: partner.clientId, payerEntityId: payer, balanceCents, currency });
    expect(await posted("treasury", partner.partnerId)).to.equal(10_000);
    await expectBooksBalanced();

    await stack.admin.treasury.fundTreasury({ clientId: partner.clientId, amountCents: 2_500n });
    expect(await posted("treasury", partner.partnerId)).to.equal(12_500);
    await expectBooksBalanced();

    await bind(5_000n); // down
    expect(await posted("treasury", partner.partnerId)).to.equal(5_000);
    await bind(5_000n); // unchanged: no movement
    await bind(8_000n); // up
    expect(await posted("treasury", partner.partnerId)).to.equal(8_000);
    expect((await treasuryMovements(partner.partnerId)).map((m) => m.kind)).to.deep.equal(["treasury.bind", "treasury.fund", "treasury.bind", "treasury.bind"]);
    await expectBooksBalanced();

    await stack.clients.treasury.executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 1_200n }]));
    expect(await balanceOf(partner)).to.equal(6_800);
    expect(await posted("treasury", partner.partnerId)).to.equal(6_800);
    expect(await posted("user", user)).to.equal(1_200);
    await expectBooksBalanced();

    // Into EUR while 6 800 USD are held: the USD balance goes out, the EUR one comes in.
    await bind(9_000n, "EUR");
    expect(await posted("treasury", partner.partnerId, "USD")).to.equal(0);
    expect(await posted("treasury", partner.partnerId, "EUR")).to.equal(9_000);
    const legs = await legsOf((await treasuryMovements(partner.partnerId)).at(-1)!.id);
    expect(legs.map((l) => [l.cents, l.currency])).to.deep.equal([
      [-6_800, "USD"],
      [6_800, "USD"],
      [9_000, "EUR"],
      [-9_000, "EUR"],
    ]);
    await expectBooksBalanced();

    await bind(0n, "USD"); // back, empty
    expect(await posted("treasury", partner.partnerId, "EUR")).to.equal(0);
    expect(await posted("treasury", partner.partnerId, "USD")).to.equal(0);
    expect(await posted("user", user)).to.equal(1_200); // the recipient keeps what was paid
    await expectBooksBalanced();
  });

  it("a batch is one payout transaction: the treasury debited by the total, one credit leg per recipient (its items summed) and one settled transfer per paid item", async () => {
    const { partner, payer, user } = await setup(10_000n);
    const other = await createRecipient(stack.admin, partner);
    const req = batchRequest(partner, payer, [
      { recipientUserId: user, amountCents: 1_000n },
      { recipientUserId: other, amountCents: 250n },
      { recipientUserId: user, amountCents: 2_000n },
    ]);
    const res = await stack.clients.treasury.executeBatch(req);
    const batchId = res.batch!.batchId;
    const [tx] = await sql<{ kind: string; reference: string }>(`SELECT kind, reference FROM ledger_transactions WHERE id = ?`, [batchId]);
    expect(tx).to.deep.equal({ kind: "payout", reference: `batch:${batchId}` });
    expect(await legsOf(batchId)).to.deep.equal([
      { account: accountId("treasury", partner.partnerId, "USD"), cents: -3_250, currency: "USD" },
      { account: accountId("user", user, "USD"), cents: 3_000, currency: "USD" },
      { account: accountId("user", other, "USD"), cents: 250, currency: "USD" },
    ]);
    // Each paid item is a settled credit in its recipient's transfers, in batch order.
    expect(await transfersOf([user, other])).to.deep.equal(
      [req.items[0]!, req.items[2]!, req.items[1]!].map((i) => ({
        userId: i.recipientUserId,
        transferId: payoutTransferId(partner.partnerId, i.executionId),
        direction: "credit",
        amountCents: i.amountCents,
        currency: "USD",
        status: "settled",
      })),
    );
    expect(await posted("user", user)).to.equal(3_000);
    expect(await posted("user", other)).to.equal(250);
    await expectBooksBalanced();
  });

  it("a replay, a reused execution_id, a conflicting or unfunded batch and a batch of only old items post nothing more", async () => {
    const { partner, payer, user } = await setup(5_000n);
    const first = batchRequest(partner, payer, [
      { recipientUserId: user, amountCents: 1_000n },
      { recipientUserId: user, amountCents: 500n },
    ]);
    const done = await stack.clients.treasury.executeBatch(first);
    const afterFirst = await footprint(partner, [user]);
    expect(afterFirst).to.deep.equal({ txs: 1, legs: 2, entries: 2, events: 1 });

    // The same request again: the stored answer, nothing posted, credited or announced.
    const replay = await stack.clients.treasury.executeBatch(first);
    expect(replay.replayed).to.equal(true);
    expect(await footprint(partner, [user])).to.deep.equal(afterFirst);

    // A new key reusing an execution id: that item is already_executed and posts nothing.
    const mixed: BatchRequestInit = { ...batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 300n }]) };
    mixed.items.unshift(first.items[0]!);
    const next = await stack.clients.treasury.executeBatch(mixed);
    expect(next.batch!.items.map((i) => i.status)).to.deep.equal([ItemStatus.ALREADY_EXECUTED, ItemStatus.EXECUTED]);
    expect(await legsOf(next.batch!.batchId)).to.have.length(2);
    expect(await footprint(partner, [user])).to.deep.equal({ txs: 2, legs: 4, entries: 3, events: 2 });

    // Refused batches roll back whole: a reused execution id with another amount, over the balance.
    const conflict = { ...batchRequest(partner, payer, []), items: [{ ...first.items[1]!, amountCents: 501n }] };
    await expectRefused(stack.clients.treasury.executeBatch(conflict), Reason.EXECUTION_CONFLICT);
    await expectRefused(
      stack.clients.treasury.executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 3_201n }])),
      Reason.INSUFFICIENT_FUNDS,
    );
    // Only already-executed items: total 0 and no (empty) ledger transaction.
    const old = await stack.clients.treasury.executeBatch({ ...first, idempotencyKey: `k-${randomUUID()}` });
    expect(old.batch!.totalCents).to.equal(0n);
    expect(await legsOf(old.batch!.batchId)).to.deep.equal([]);
    expect(await footprint(partner, [user])).to.deep.equal({ txs: 2, legs: 4, entries: 3, events: 2 });

    expect(await balanceOf(partner)).to.equal(5_000 - 1_800);
    expect(await posted("treasury", partner.partnerId)).to.equal(3_200);
    expect(await posted("user", user)).to.equal(1_800);
    expect(done.batch!.totalCents).to.equal(1_500n);
    await expectBooksBalanced();
  });

  it("a batch failing inside its transaction (after every write) or without its audit row leaves the books as they were; the retry posts once", async () => {
    const { partner, payer, user } = await setup(5_000n);
    await grantConsent(stack.admin, partner, user, ["transfers:read"]); // the payer, entitled to read transfers, gets transfer.settled too
    const req = batchRequest(partner, payer, [
      { recipientUserId: user, amountCents: 700n },
      { recipientUserId: user, amountCents: 300n },
    ]);
    const before = await footprint(partner, [user]);

    failNextBatch = true;
    await expectInternalError(stack.clients.treasury.executeBatch(req));
    expect(failedBatchId).to.be.a("string");
    expect(await sql(`SELECT id FROM ledger_transactions WHERE id = ?`, [failedBatchId])).to.deep.equal([]);
    expect(await footprint(partner, [user])).to.deep.equal(before);

    auditDown = true;
    await expectRefused(stack.clients.treasury.executeBatch(req), Reason.AUDIT_UNAVAILABLE);
    auditDown = false;
    expect(await footprint(partner, [user])).to.deep.equal(before);
    expect(await balanceOf(partner)).to.equal(5_000);
    await expectBooksBalanced();

    const ok = await stack.clients.treasury.executeBatch(req);
    expect(ok.replayed).to.equal(false);
    // One transaction of two legs (the treasury, the one recipient), two entries, and payout.executed + two transfer.settled.
    expect(await footprint(partner, [user])).to.deep.equal({ txs: 1, legs: 2, entries: 2, events: 3 });
    const types = await sql<{ type: string }>(`SELECT type FROM partner_events WHERE partner_id = ? ORDER BY seq`, [partner.partnerId]);
    expect(types.map((t) => t.type)).to.deep.equal(["payout.executed", "transfer.settled", "transfer.settled"]);
    await expectBooksBalanced();
  });

  describe("under concurrency (Postgres)", function () {
    this.timeout(120_000);
    beforeEach(function () {
      requirePostgres(this, "concurrent batches, funds and binds need several connections");
    });

    it("many concurrent batches and funds on one treasury: no overspend, each paid item is exactly one transfer and in exactly one credit leg, the books balance", async () => {
      const { partner, payer, user } = await setup(20_000n);
      const users = [user, ...(await Promise.all(Array.from({ length: 4 }, () => createRecipient(stack.admin, partner))))];
      // Every batch also carries one shared execution id: it must be paid exactly once.
      const shared = batchRequest(partner, payer, [{ recipientUserId: users[0]!, amountCents: 100n }]).items[0]!;
      const batches = Array.from({ length: 30 }, (_, n) => {
        const req = batchRequest(
          partner,
          payer,
          Array.from({ length: 3 }, (_, i) => ({ recipientUserId: users[(n + i) % users.length]!, amountCents: BigInt(300 + 100 * i) })),
        );
        req.items.splice(n % 3, 0, shared);
        return req;
      });
      const funds = 10;
      const outcomes = await Promise.all([
        ...batches.map((req) =>
          stack.clients.treasury.executeBatch(req).then(
            (res) => res.batch!,
            (e: unknown) => reasonOf(e),
          ),
        ),
        ...Array.from({ length: funds }, () =>
          stack.admin.treasury.fundTreasury({ clientId: partner.clientId, amountCents: 1_000n }).then(() => "funded" as const),
        ),
      ]);
      const paid = outcomes.filter((o) => typeof o === "object");
      const refused = outcomes.filter((o) => typeof o === "number");
      expect(refused.every((r) => r === Reason.INSUFFICIENT_FUNDS)).to.equal(true);
      expect(paid.length).to.be.greaterThan(0);
      const spent = paid.reduce((sum, b) => sum + Number(b.totalCents), 0);
      expect(await balanceOf(partner))
        .to.equal(20_000 + funds * 1_000 - spent)
        .and.to.be.at.least(0);

      const executed = await sql<{ execution_id: string; recipient_user_id: string; amount_cents: string; batch_id: string }>(
        `SELECT execution_id, recipient_user_id, amount_cents::text, batch_id FROM treasury_executions WHERE partner_id = ?`,
        [partner.partnerId],
      );
      expect(executed.filter((e) => e.execution_id === shared.executionId)).to.have.length(1);
      expect(executed.reduce((sum, e) => sum + Number(e.amount_cents), 0)).to.equal(spent);
      const transfers = await transfersOf(users);
      expect(transfers.map((t) => t.transferId).sort()).to.deep.equal(executed.map((e) => payoutTransferId(partner.partnerId, e.execution_id)).sort());
      // One credit leg per recipient of each batch, in that batch's transaction, summing the
      // items it executed for them; one debit per paying batch.
      const legs = await sql<{ transaction_id: string; account_id: string; amount_cents: string }>(
        `SELECT p.transaction_id, p.account_id, p.amount_cents::text FROM ledger_postings p JOIN treasury_batches b ON b.id = p.transaction_id WHERE b.partner_id = ?`,
        [partner.partnerId],
      );
      const credits = legs.filter((l) => Number(l.amount_cents) > 0);
      const key = (batch: string, account: string, cents: string | number) => `${batch}/${account}/${cents}`;
      const perRecipient = new Map<string, number>();
      for (const e of executed) {
        const k = `${e.batch_id}/${accountId("user", e.recipient_user_id, "USD")}`;
        perRecipient.set(k, (perRecipient.get(k) ?? 0) + Number(e.amount_cents));
      }
      expect(credits.map((l) => key(l.transaction_id, l.account_id, l.amount_cents)).sort()).to.deep.equal(
        [...perRecipient].map(([k, cents]) => `${k}/${cents}`).sort(),
      );
      const paying = paid.filter((b) => b.totalCents > 0n);
      expect(
        legs
          .filter((l) => Number(l.amount_cents) < 0)
          .map((l) => key(l.transaction_id, l.account_id, l.amount_cents))
          .sort(),
      ).to.deep.equal(paying.map((b) => key(b.batchId, accountId("treasury", partner.partnerId, "USD"), String(-b.totalCents))).sort());
      await expectBooksBalanced();
    });

    it("partners paying the same new recipients at once, while transfers are recorded for them, all succeed and the books balance", async () => {
      const partners = await Promise.all(
        Array.from({ length: 6 }, () => createPartner(stack, { entitlements: ["treasury:write", "transfers:read"] }).then((p) => withToken(stack.clients, p))),
      );
      const payers = await Promise.all(partners.map((p) => bindTreasury(stack.admin, p, { balanceCents: 1_000_000n })));
      const users = await Promise.all(
        Array.from({ length: 8 }, () => stack.admin.partners.createUser({ email: `r-${randomUUID()}@example.test` }).then((u) => u.userId)),
      );
      for (const p of partners) for (const u of users) await grantConsent(stack.admin, p, u, ["payouts:receive", "transfers:read"]);
      // Each partner pays the users in another order; none of them has a user account yet.
      const results = await Promise.all([
        ...partners.map((p, n) => {
          const order = n % 2 === 0 ? users : [...users].reverse();
          const rotated = [...order.slice(n), ...order.slice(0, n)];
          return stack.clients.treasury.executeBatch(
            batchRequest(
              p,
              payers[n]!,
              rotated.map((u) => ({ recipientUserId: u, amountCents: 100n })),
            ),
          );
        }),
        ...users.map((u) => stack.admin.partnerResources.recordLedgerEntry({ userId: u, direction: "credit", amountCents: 7n })),
      ]);
      expect(results).to.have.length(partners.length + users.length);
      for (const u of users) expect(await posted("user", u)).to.equal(partners.length * 100 + 7);
      // Every partner is entitled to and holds transfers:read of every user: one transfer.settled per payout per partner, plus the recorded credits.
      const [row] = await sql<{ n: number }>(`SELECT count(*)::int AS n FROM partner_events WHERE type = 'transfer.settled' AND partner_id = ANY(?::uuid[])`, [
        partners.map((p) => p.partnerId),
      ]);
      expect(row!.n).to.equal(partners.length * (partners.length * users.length + users.length));
      await expectBooksBalanced();
    });

    it("concurrent first binds, rebinds and funds of one partner leave the treasury's account equal to its balance", async () => {
      const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["treasury:write"] }));
      const payer = randomUUID();
      await Promise.all([
        ...Array.from({ length: 12 }, (_, n) =>
          stack.admin.treasury.bindTreasury({
            clientId: partner.clientId,
            payerEntityId: payer,
            balanceCents: BigInt(1_000 * (n + 1)),
            currency: n % 4 === 3 ? "EUR" : "USD",
          }),
        ),
        ...Array.from({ length: 12 }, () =>
          stack.admin.treasury.fundTreasury({ clientId: partner.clientId, amountCents: 50n }).catch((e: unknown) => {
            // A fund that ran before the first bind committed finds no treasury.
            if (reasonOf(e) !== Reason.TREASURY_NOT_CONFIGURED) throw e;
          }),
        ),
      ]);
      const t = (await stack.clients.treasury.getTreasury({ accessToken: partner.token })).treasury!;
      expect(await posted("treasury", partner.partnerId, t.currency)).to.equal(Number(t.availableCents));
      expect(await posted("treasury", partner.partnerId, t.currency === "USD" ? "EUR" : "USD")).to.equal(0);
      await expectBooksBalanced();
    });
  });
});
