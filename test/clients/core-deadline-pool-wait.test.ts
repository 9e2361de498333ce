import http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { expect } from "chai";
import { rpcDuration } from "../../core/observability/metrics.js";
import { BudgetsService } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { FundVaultRequestSchema } from "../../gen/vaultgate/budgets/v1/funds_pb.js";
import { TreasuryService, TreasuryStatus } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { balanceOf, budgetUnderRoot } from "../support/budget-life.js";
import { budgetParams, createOwner, grantFor, payment } from "../support/budgets.js";
import { grpcCoreSuite } from "../support/grpc-core.js";
import { createPartner } from "../support/partners.js";
import { doneThoughLeft, holdPool, leftInThePool as sharedLeftInThePool } from "../support/db-holds.js";
import { countOf } from "../support/metrics.js";
import { batchRequest, bindTreasury, createRecipient, withToken } from "../support/treasury.js";

/** The caller's deadline: it passes while the call still waits for a database connection. */
const DEADLINE_MS = 300;

/**
 * A funding call whose deadline passes while it waits for a database connection is answered
 * DEADLINE_EXCEEDED, and once a connection frees up nothing is written for it: no money moved, no
 * ledger transaction, no audit row (FundVault and FundTreasury have no key: a retry paid twice).
 */
describe("a deadline that passes while a write waits for a database connection (core on its real port)", function () {
  this.timeout(60_000);
  // Key states kept a minute: however slowly the pool is held, no key-state reread waits behind it.
  const suite = grpcCoreSuite({ keyStateTtlMs: 60_000 });

  const operator: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${suite.stack.adminToken}`);
    return next(req);
  };
  const client = <S extends typeof BudgetsService | typeof TreasuryService>(service: S) =>
    createClient(service, createGrpcTransport({ baseUrl: suite.core.server.url, interceptors: [operator] }));
  const db = () => suite.stack.core.db;
  /** Calls of `Service/Method` core finished (with `code`, or any). */
  const finished = (service: string, method: string, code?: string) => countOf(rpcDuration, { service, method, ...(code ? { code } : {}) });
  const leftInThePool = (service: string, method: string, call: () => Promise<unknown>) => sharedLeftInThePool(db(), DEADLINE_MS, service, method, call);

  it("FundVault: the vault's balance, ledger and audit trail are unchanged", async () => {
    const owner = await createOwner(suite.stack);
    const budgets = client(BudgetsService);
    const balance = async () => Number((await db()("vaults").where({ id: owner.vaultId }).first()).balance_cents);
    const audited = async () => db()("audit_records").where({ action: "vault.fund", subject: owner.vaultId });
    const ledger = async () => db()("ledger_transactions").where({ kind: "vault.fund", reference: `vault:${owner.vaultId}` });
    await leftInThePool("vaultgate.budgets.v1.BudgetsService", "FundVault", () =>
      budgets.fundVault({ vaultId: owner.vaultId, amountCents: 500n }, { timeoutMs: DEADLINE_MS }),
    );
    expect(await balance()).to.equal(0);
    expect(await ledger()).to.have.length(0);
    expect(await audited()).to.have.length(0);
    // With time to run, the same call funds the vault once.
    await budgets.fundVault({ vaultId: owner.vaultId, amountCents: 500n });
    expect(await balance()).to.equal(500);
    expect(await ledger()).to.have.length(1);
    expect(await audited()).to.have.length(1);
  });

  it("FundBudget (an agent, in withBudget): neither vault's balance changes, and the same key then funds once", async () => {
    const { owner, parentToken, budget } = await budgetUnderRoot(suite.stack, { parentCents: 10_000n });
    const budgets = createClient(BudgetsService, createGrpcTransport({ baseUrl: suite.core.server.url }));
    const fund = (options = {}) =>
      budgets.fundBudget({ accessToken: parentToken, vaultId: budget.vaultId, amountCents: 700n, idempotencyKey: "deadline-fund-0001" }, options);
    const before = { parent: await balanceOf(suite.stack, owner.vaultId), child: await balanceOf(suite.stack, budget.vaultId) };
    await leftInThePool("vaultgate.budgets.v1.BudgetsService", "FundBudget", () => fund({ timeoutMs: DEADLINE_MS }));
    expect({ parent: await balanceOf(suite.stack, owner.vaultId), child: await balanceOf(suite.stack, budget.vaultId) }).to.deep.equal(before);
    await fund();
    expect({ parent: await balanceOf(suite.stack, owner.vaultId), child: await balanceOf(suite.stack, budget.vaultId) }).to.deep.equal({
      parent: before.parent - 700,
      child: before.child + 700,
    });
  });

  it("InitiatePayment (an agent): no payment, nothing spent, and the same key then pays once", async () => {
    const { child } = await budgetUnderRoot(suite.stack, { parentCents: 10_000n });
    await suite.stack.admin.budgets.fundVault({ vaultId: child.vaultId, amountCents: 5_000n });
    const agentToken = await grantFor(suite.stack, child);
    const budgets = createClient(BudgetsService, createGrpcTransport({ baseUrl: suite.core.server.url }));
    const request = { accessToken: agentToken, payment: payment({ amountCents: 700n, idempotencyKey: "deadline-pay-0001" }) };
    await leftInThePool("vaultgate.budgets.v1.BudgetsService", "InitiatePayment", () => budgets.initiatePayment(request, { timeoutMs: DEADLINE_MS }));
    expect(await db()("agent_payments").where({ vault_id: child.vaultId })).to.have.length(0);
    expect(await balanceOf(suite.stack, child.vaultId)).to.equal(5_000);
    await budgets.initiatePayment(request);
    await budgets.initiatePayment(request);
    expect(await db()("agent_payments").where({ vault_id: child.vaultId })).to.have.length(1);
    expect(await balanceOf(suite.stack, child.vaultId)).to.equal(4_300);
  });

  it("CreateBudget (an agent): no budget, no vault, no audit row, no rate-limit start, and the same key then makes one budget", async () => {
    const owner = await createOwner(suite.stack);
    const accessToken = await grantFor(suite.stack, owner, { stepUp: true });
    const budgets = createClient(BudgetsService, createGrpcTransport({ baseUrl: suite.core.server.url }));
    const request = { accessToken, ...budgetParams({ idempotencyKey: "deadline-budget-0001" }) };
    const children = async () => db()("vaults").where({ parent_vault_id: owner.vaultId });
    const audited = async () => db()("audit_records").where({ action: "agent.budget.create", actor: `agent:${owner.agentPrincipalId}` });
    await leftInThePool("vaultgate.budgets.v1.BudgetsService", "CreateBudget", () => budgets.createBudget(request, { timeoutMs: DEADLINE_MS }));
    expect(await db()("budgets").where({ parent_vault_id: owner.vaultId })).to.have.length(0);
    expect(await children()).to.have.length(0);
    expect(await audited()).to.have.length(0);
    expect(await db()("rate_limit_logs").where({ key: `budget-provisioning:${owner.vaultId}` })).to.have.length(0);
    const first = (await budgets.createBudget(request)).budget!;
    expect((await budgets.createBudget(request)).budget!.vaultId).to.equal(first.vaultId);
    expect(await children()).to.have.length(1);
    expect(await audited()).to.have.length(1);
  });

  it("FundTreasury: the treasury's balance and audit trail are unchanged", async () => {
    const partner = await createPartner(suite.stack, { entitlements: ["treasury:write", "payouts:receive"] });
    await bindTreasury(suite.stack.admin, partner, { balanceCents: 1000n });
    const treasury = client(TreasuryService);
    const balance = async () => Number((await db()("treasuries").where({ partner_id: partner.partnerId }).first()).balance_cents);
    const audited = async () => db()("audit_records").where({ action: "treasury.fund", subject: partner.clientId });
    await leftInThePool("vaultgate.treasury.v1.TreasuryService", "FundTreasury", () =>
      treasury.fundTreasury({ clientId: partner.clientId, amountCents: 500n }, { timeoutMs: DEADLINE_MS }),
    );
    expect(await balance()).to.equal(1000);
    expect(await audited()).to.have.length(0);
    await treasury.fundTreasury({ clientId: partner.clientId, amountCents: 500n });
    expect(await balance()).to.equal(1500);
    expect(await audited()).to.have.length(1);
  });

  it("ExecuteBatch (a partner): no batch, no payout, the balance unchanged; then the same key pays once", async () => {
    const partner = await createPartner(suite.stack, { entitlements: ["treasury:write", "payouts:receive"] });
    const payer = await bindTreasury(suite.stack.admin, partner, { balanceCents: 1000n });
    const recipient = await createRecipient(suite.stack.admin, partner);
    const paying = await withToken(suite.stack.clients, partner);
    const treasury = createClient(TreasuryService, createGrpcTransport({ baseUrl: suite.core.server.url }));
    const request = batchRequest(paying, payer, [{ recipientUserId: recipient, amountCents: 300n }]);
    const balance = async () => Number((await db()("treasuries").where({ partner_id: partner.partnerId }).first()).balance_cents);
    const batches = async () => db()("treasury_executions").where({ partner_id: partner.partnerId });
    // Key states fresh: the access checks' batch is taken at once, so the
    // call's wait for a connection is its own transaction's.
    await treasury.getTreasury({ accessToken: paying.token });
    await leftInThePool("vaultgate.treasury.v1.TreasuryService", "ExecuteBatch", () => treasury.executeBatch(request, { timeoutMs: DEADLINE_MS }));
    expect(await batches()).to.have.length(0);
    expect(await balance()).to.equal(1000);
    await treasury.executeBatch(request);
    await treasury.executeBatch(request);
    expect(await batches()).to.have.length(1);
    expect(await balance()).to.equal(700);
  });

  it("SetTreasuryStatus suspended (it ends access): done though its caller left while it waited", async () => {
    const partner = await createPartner(suite.stack, { entitlements: ["treasury:write", "payouts:receive"] });
    await bindTreasury(suite.stack.admin, partner, { balanceCents: 1000n });
    const suspended = async () => (await db()("treasuries").where({ partner_id: partner.partnerId }).first()).status === "suspended";
    const suspend = () =>
      client(TreasuryService).setTreasuryStatus({ clientId: partner.clientId, status: TreasuryStatus.SUSPENDED }, { timeoutMs: DEADLINE_MS });
    await doneThoughLeft(db(), DEADLINE_MS, suspend, suspended);
    expect(await db()("audit_records").where({ action: "treasury.set_status.suspended", subject: partner.clientId })).to.have.length(1);
  });

  it("FundVault whose caller resets its stream (INTERNAL_ERROR, as connect-node does on a deadline): CANCELLED, nothing written", async () => {
    const owner = await createOwner(suite.stack);
    const message = toBinary(FundVaultRequestSchema, create(FundVaultRequestSchema, { vaultId: owner.vaultId, amountCents: 500n }));
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    frame.set(message, 5);
    const service = "vaultgate.budgets.v1.BudgetsService";
    const before = { finished: await finished(service, "FundVault"), cancelled: await finished(service, "FundVault", "CANCELED") };
    const pending = () => (db().client as { pool: { numPendingAcquires(): number } }).pool.numPendingAcquires();
    const pool = await holdPool(db());
    const session = http2.connect(suite.core.server.url);
    try {
      const stream = session.request({
        ":method": "POST",
        ":path": `/${service}/FundVault`,
        "content-type": "application/grpc",
        te: "trailers",
        authorization: `Bearer ${suite.stack.adminToken}`,
      });
      stream.on("error", () => {});
      stream.end(frame);
      for (let i = 0; i < 1000 && pending() === 0; i++) await new Promise((r) => setTimeout(r, 10));
      expect(pending(), "the call waits for a connection").to.be.greaterThan(0);
      stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR);
      // The reset is read by core on its next turns of the event loop, before the pool is freed.
      await new Promise((r) => setTimeout(r, DEADLINE_MS));
    } finally {
      await pool.release();
      session.close();
    }
    for (let i = 0; i < 1000 && (await finished(service, "FundVault")) === before.finished; i++) await new Promise((r) => setTimeout(r, 10));
    expect(await finished(service, "FundVault", "CANCELED"), "a cancel, not an internal error").to.equal(before.cancelled + 1);
    expect(Number((await db()("vaults").where({ id: owner.vaultId }).first()).balance_cents)).to.equal(0);
    expect(await db()("audit_records").where({ action: "vault.fund", subject: owner.vaultId })).to.have.length(0);
  });
});
