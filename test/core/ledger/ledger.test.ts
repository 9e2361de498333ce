import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { createCore, type Core } from "../../../core/core.js";
import { createDb, type Db } from "../../../core/db/knex.js";
import { migrateLatest } from "../../../core/db/migrate.js";
import { accountId } from "../../../core/ledger/accounts.js";
import { createCoreClients, type CoreClients } from "../../../gateways/core-clients.js";
import { createRouterTransport, type Interceptor } from "@connectrpc/connect";
import { startStack, uniqueSlug, TEST_AUDIENCE, TEST_ISSUER, type TestStack } from "../../support/stack.js";
import { testDatabase } from "../../support/db.js";
import { createCapturedLogger } from "../../support/logs.js";
import { expectRefused, thrownBy } from "../../support/refusals.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";

/**
 * The double-entry ledger: every movement is a balanced, append-only transaction written
 * with the state change, and VerifyLedger proves the whole database.
 */
describe("Ledger", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let db: Db;
  before(async () => {
    stack = await startStack();
    db = (await testDatabase()).db;
  });
  after(() => stack.close());

  const user = async () => {
    const u = await stack.admin.partners.createUser({ email: `${uniqueSlug("ledger")}@example.test` });
    return u;
  };

  it("records vault funding as one balanced transaction next to the balance, and verify holds", async () => {
    const u = await user();
    await stack.admin.budgets.fundVault({ vaultId: u.vaultId, amountCents: 2_500n });
    await stack.admin.budgets.fundVault({ vaultId: u.vaultId, amountCents: 500n });
    const legs = await db("ledger_postings")
      .where({ account_id: accountId("vault", u.vaultId, "USD") })
      .orderBy("seq");
    expect(legs.map((l) => Number(l.amount_cents))).to.deep.equal([2_500, 500]);
    for (const leg of legs) {
      const all = await db("ledger_postings").where({ transaction_id: leg.transaction_id });
      expect(all).to.have.length(2);
      expect(all.reduce((s, l) => s + Number(l.amount_cents), 0)).to.equal(0);
      expect(all.map((l) => l.account_id)).to.include(accountId("external", "funding", "USD"));
      const tx = await db("ledger_transactions").where({ id: leg.transaction_id }).first();
      expect(tx.kind).to.equal("vault.fund");
    }
    const report = await stack.admin.audit.verifyLedger({});
    expect(report.discrepancies).to.deep.equal([]);
    expect(report.ok).to.equal(true);
    expect(Number(report.postings)).to.be.greaterThan(3);
  });

  it("records a settled transfer entry against the user's account; pending and failed ones move nothing", async () => {
    const u = await user();
    const settled = await stack.admin.partnerResources.recordLedgerEntry({
      userId: u.userId,
      direction: "credit",
      amountCents: 700n,
      currency: "EUR",
      status: "settled",
    });
    await stack.admin.partnerResources.recordLedgerEntry({ userId: u.userId, direction: "debit", amountCents: 200n, currency: "EUR", status: "settled" });
    await stack.admin.partnerResources.recordLedgerEntry({ userId: u.userId, direction: "credit", amountCents: 900n, currency: "EUR", status: "pending" });
    await stack.admin.partnerResources.recordLedgerEntry({ userId: u.userId, direction: "credit", amountCents: 900n, currency: "EUR", status: "failed" });
    const legs = await db("ledger_postings")
      .where({ account_id: accountId("user", u.userId, "EUR") })
      .orderBy("seq");
    expect(legs.map((l) => Number(l.amount_cents))).to.deep.equal([700, -200]);
    expect(legs[0].transaction_id).to.equal(settled.transfer!.transferId);
    const account = await db("ledger_accounts")
      .where({ id: accountId("user", u.userId, "EUR") })
      .first();
    expect(account).to.include({ kind: "user", owner: u.userId, currency: "EUR" });
    expect((await stack.admin.audit.verifyLedger({})).ok).to.equal(true);
  });

  it("refuses a transfer of nothing, and books nothing for it", async () => {
    const u = await user();
    await expectRefused(
      stack.admin.partnerResources.recordLedgerEntry({ userId: u.userId, direction: "credit", amountCents: 0n }),
      Reason.INVALID_REQUEST,
      /amount_cents must be an integer from 1 to 9007199254740991/,
    );
    expect(await db("ledger_postings").where({ account_id: accountId("user", u.userId, "USD") })).to.deep.equal([]);
  });

  it("opens a vault's account with the vault", async () => {
    const u = await user();
    const account = await db("ledger_accounts")
      .where({ id: accountId("vault", u.vaultId, "USD") })
      .first();
    expect(account).to.include({ kind: "vault", owner: u.vaultId, currency: "USD" });
  });

  it("refuses to update or delete postings, transactions and accounts (the database enforces it)", async () => {
    const u = await user();
    await stack.admin.budgets.fundVault({ vaultId: u.vaultId, amountCents: 100n });
    const leg = await db("ledger_postings")
      .where({ account_id: accountId("vault", u.vaultId, "USD") })
      .first();
    for (const attempt of [
      () => db("ledger_postings").where({ seq: leg.seq }).update({ amount_cents: 1_000_000 }),
      () => db("ledger_postings").where({ seq: leg.seq }).delete(),
      () => db("ledger_transactions").where({ id: leg.transaction_id }).update({ kind: "x" }),
      () => db("ledger_transactions").where({ id: leg.transaction_id }).delete(),
      () => db("ledger_accounts").where({ id: leg.account_id }).update({ currency: "EUR" }),
    ]) {
      expect(String(await thrownBy(attempt))).to.match(/append-only/);
    }
    expect((await stack.admin.audit.verifyLedger({})).ok).to.equal(true);
  });

  it("VerifyLedger is for the operator only", async () => {
    await expectRefused(stack.clients.audit.verifyLedger({}), Reason.ADMIN_UNAUTHENTICATED, /^operator credential required$/);
  });
});

/** A database of its own: these tests damage the books on purpose. */
describe("Ledger verify finds every kind of damage", function () {
  this.timeout(60_000);
  let db: Db;
  let core: Core;
  let admin: CoreClients;
  before(async () => {
    db = createDb({});
    await migrateLatest(db);
    const adminToken = "ledger-damage-admin-token";
    core = await createCore({
      db: { instance: db },
      logger: createCapturedLogger().logger,
      adminToken,
      gatewayToken: "ledger-damage-gateway-token",
      issuer: TEST_ISSUER,
      partnerAudience: TEST_AUDIENCE,
      migrate: false,
    });
    const auth: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${adminToken}`);
      return next(req);
    };
    admin = createCoreClients(createRouterTransport(core.routes, { router: { interceptors: core.interceptors }, transport: { interceptors: [auth] } }));
  });
  after(async () => {
    await core.close();
    await db.destroy();
  });

  it("a clean database verifies; a balance changed behind the ledger's back is named", async () => {
    const u = await admin.partners.createUser({ email: "damage@example.test" });
    await admin.budgets.fundVault({ vaultId: u.vaultId, amountCents: 1_000n });
    expect((await admin.audit.verifyLedger({})).ok).to.equal(true);
    await db.raw("UPDATE vaults SET balance_cents = balance_cents + 1 WHERE id = ?", [u.vaultId]);
    const report = await admin.audit.verifyLedger({});
    expect(report.ok).to.equal(false);
    expect(report.discrepancies.map((d) => d.check)).to.deep.equal(["balance_mismatch"]);
    expect(report.discrepancies[0]!.message).to.equal(`vault ${u.vaultId} holds 1001 USD but its postings sum to 1000`);
    await db.raw("UPDATE vaults SET balance_cents = balance_cents - 1 WHERE id = ?", [u.vaultId]);
    expect((await admin.audit.verifyLedger({})).ok).to.equal(true);
  });

  it("refuses TRUNCATE of the ledger's tables (here: TRUNCATE waits for every open transaction on a shared database)", async () => {
    for (const table of ["ledger_postings", "ledger_transactions", "ledger_accounts"]) {
      expect(String(await thrownBy(db.raw(`TRUNCATE ${table}`)))).to.match(/append-only/);
    }
  });

  it("names an unbalanced transaction, a leg of an unknown transaction or account, and an empty transaction", async () => {
    const tx = randomUUID();
    const stray = randomUUID();
    const nowhere = randomUUID();
    const empty = randomUUID();
    const funding = accountId("external", "funding", "USD");
    await db.raw(`INSERT INTO ledger_transactions (id, kind, reference, created_at) VALUES (?, 'vault.fund', 'x', now()), (?, 'vault.fund', 'y', now())`, [
      tx,
      empty,
    ]);
    await db.raw(`INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at) VALUES (?, ?, 5, 'USD', now())`, [tx, funding]);
    await db.raw(
      `INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at) VALUES (?, ?, 7, 'USD', now()), (?, ?, -7, 'USD', now())`,
      [stray, funding, stray, funding],
    );
    await db.raw(`INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at) VALUES (?, ?, -5, 'USD', now())`, [tx, nowhere]);
    const report = await admin.audit.verifyLedger({});
    expect(report.ok).to.equal(false);
    const byCheck = Object.fromEntries(report.discrepancies.map((d) => [d.check, d.message]));
    expect(Object.keys(byCheck)).to.have.members(["transaction_unknown", "transaction_empty", "account_unknown"]);
    expect(byCheck.transaction_unknown).to.include(stray);
    expect(byCheck.transaction_empty).to.include(empty);
    expect(byCheck.account_unknown).to.include(nowhere);
    // tx's legs (+5 on funding, -5 on an unknown account) balance; one more leg unbalances it.
    await db.raw(`INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at) VALUES (?, ?, 3, 'USD', now())`, [tx, funding]);
    const again = await admin.audit.verifyLedger({});
    expect(again.discrepancies[0]).to.deep.include({ check: "transaction_unbalanced", message: `transaction ${tx} does not balance: its USD legs sum to 3` });
  });
});
