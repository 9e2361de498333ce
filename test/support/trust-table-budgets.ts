import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { paymentWire, type TestUser } from "./trust.js";
import type { WireResponse } from "./grpc-core.js";

import { admin, agent, session, refused, S, type Case, type Ctx, type Entry } from "./trust-cases.js";

/** The response fields the checks below read (see WireResponse for how they are decoded). */
type BudgetRes = { budget: { status: string } };
type PaymentRes = { payment: { status: string; payment_id: string } };
type PendingRes = { pending_payments: { payment_id: string }[] };
type MoneyViewRes = { vaults: { vault_id: string; balance_cents: string }[] };

const draftBudget = (c: Ctx, owner: TestUser) => c.f.budget(owner, { stepUp: false });
const pending = (c: Ctx, owner: TestUser) => c.f.pendingPayment(owner);
const pendingIds = async (c: Ctx, owner: TestUser) => {
  const s = await c.f.session(owner);
  const res = await c.stack.clients.budgets.listPendingApprovals({ sessionToken: s });
  return { budgets: res.draftBudgets.map((b) => b.agentPrincipalId), payments: res.pendingPayments.map((p) => p.paymentId) };
};

/** An active budget under the user's root vault, which holds 1,000 cents to fund it from. */
const fundableBudget = async (c: Ctx, user: TestUser) => {
  const b = await c.f.budget(user, { stepUp: true });
  await c.stack.admin.budgets.fundVault({ vaultId: user.vaultId, amountCents: 1_000n });
  return { user, vaultId: b.vaultId };
};
type BudgetFx = Awaited<ReturnType<typeof fundableBudget>>;
const vaultRow = async (c: Ctx, vaultId: string) => Number((await c.stack.core.db("vaults").where({ id: vaultId }).first("balance_cents")).balance_cents);
const budgetRow = async (c: Ctx, vaultId: string) => (await c.stack.core.db("budgets").where({ vault_id: vaultId }).first("status")).status as string;
/** A refused fund or close left the budget as it was: active, empty, its parent untouched. */
const untouched = (c: Ctx, fx: BudgetFx) => async () => {
  expect([await budgetRow(c, fx.vaultId), await vaultRow(c, fx.vaultId), await vaultRow(c, fx.user.vaultId)]).to.deep.equal(["active", 0, 1_000]);
};

/**
 * An RPC that takes either an agent's access token or the owner's session: every agent
 * case and every session case, plus the mix-ups between them and the wrong grants.
 */
function agentOrSession(a: Entry, s: Entry, build: (creds: { access_token?: string; session_token?: string }, fx: BudgetFx) => object): Entry {
  const hostile: Case[] = [
    refused("as an agent whose grant is on the budget's own vault, not its parent", S.PERMISSION_DENIED, async (c) => {
      const user = await c.f.user();
      const fx = await fundableBudget(c, user);
      const own = await c.f.grant(user, { stepUp: true, vaultId: fx.vaultId });
      return { req: build({ access_token: own.accessToken }, fx), after: untouched(c, fx) };
    }),
    refused("as another user's agent naming the budget", S.NOT_FOUND, async (c) => {
      const fx = await fundableBudget(c, await c.f.user());
      const other = await c.f.grant(await c.f.user(), { stepUp: true });
      return { req: build({ access_token: other.accessToken }, fx), after: untouched(c, fx) };
    }),
    refused("with both the agent's access token and the owner's session", S.INVALID_ARGUMENT, async (c) => {
      const user = await c.f.user();
      const fx = await fundableBudget(c, user);
      const token = (await c.f.grant(user, { stepUp: true })).accessToken;
      return { req: build({ access_token: token, session_token: await c.f.steppedUpSession(user) }, fx), after: untouched(c, fx) };
    }),
  ];
  return {
    kind: "agent or session",
    cases: [...a.cases.map((x) => ({ ...x, name: `as an agent: ${x.name}` })), ...s.cases.map((x) => ({ ...x, name: `as the owner: ${x.name}` })), ...hostile],
  };
}

const fundWire = (creds: { access_token?: string; session_token?: string }, fx: BudgetFx) => ({
  ...creds,
  vault_id: fx.vaultId,
  amount_cents: "100",
  idempotency_key: `tb-${randomUUID()}`,
});
const closeWire = (creds: { access_token?: string; session_token?: string }, fx: BudgetFx) => ({ ...creds, vault_id: fx.vaultId });
const funded = (c: Ctx, fx: BudgetFx) => async (res: WireResponse | undefined) => {
  expect([String(res!.balance_cents), res!.replayed]).to.deep.equal(["100", false]);
  expect([await vaultRow(c, fx.vaultId), await vaultRow(c, fx.user.vaultId)]).to.deep.equal([100, 900]);
};
const closed = (c: Ctx, fx: BudgetFx) => async (res: WireResponse | undefined) => {
  expect([res!.status, res!.already_closed]).to.deep.equal(["BUDGET_STATUS_CLOSED", false]);
  expect(await budgetRow(c, fx.vaultId)).to.equal("closed");
};

/** A fundable budget holding 100 cents, closed with keep_funds: what SweepBudget moves back. */
const keptBudget = async (c: Ctx, user: TestUser) => {
  const fx = await fundableBudget(c, user);
  await c.stack.admin.budgets.fundVault({ vaultId: fx.vaultId, amountCents: 100n });
  await c.stack.clients.budgets.closeBudget({ accessToken: (await c.f.grant(user, { stepUp: true })).accessToken, vaultId: fx.vaultId, keepFunds: true });
  return fx;
};
const swept = (c: Ctx, fx: BudgetFx) => async (res: WireResponse | undefined) => {
  expect([String(res!.swept_cents), res!.nothing_to_sweep]).to.deep.equal(["100", false]);
  expect([await vaultRow(c, fx.vaultId), await vaultRow(c, fx.user.vaultId)]).to.deep.equal([0, 1_100]);
};

/** A client's authorization request naming the owner's vault (wire shape). */
/** Trust table entries of the budgets service. */
/** The payment each user's granted agent made, so GetPayment reads one of its own vault. */
const paymentOf = new WeakMap<TestUser, string>();

export const BUDGETS_TABLE: Record<string, Entry> = {
  // vaultgate.budgets.v1.BudgetsService.
  "vaultgate.budgets.v1.BudgetsService/CreateBudget": agent(
    (t) => ({ access_token: t, purpose: "trip", display_name: "Trust budget", chain_allowlist: ["base"], idempotency_key: `tb-${randomUUID()}` }),
    { scope: "agent:budget:create" },
  ),
  "vaultgate.budgets.v1.BudgetsService/ActivateBudget": session(
    (t, fx: { agentPrincipalId: string }) => ({ session_token: t, agent_principal_id: fx.agentPrincipalId }),
    {
      setup: draftBudget,
      stepUp: true,
      otherUser: S.NOT_FOUND,
      after: (_c, _o, _fx, res) => void expect((res as BudgetRes).budget.status).to.equal("BUDGET_STATUS_ACTIVE"),
    },
  ),
  "vaultgate.budgets.v1.BudgetsService/InitiatePayment": agent((t) => ({ access_token: t, payment: paymentWire() }), {
    scope: "payments:initiate",
    grant: async (c, u) => (await c.f.fundedBudget(u)).agent,
  }),
  "vaultgate.budgets.v1.BudgetsService/SimulatePayment": agent((t) => ({ access_token: t, payment: paymentWire() }), {
    scope: "payments:simulate",
    grant: async (c, u) => (await c.f.fundedBudget(u)).agent,
  }),
  "vaultgate.budgets.v1.BudgetsService/ApprovePayment": session((t, fx: { paymentId: string }) => ({ session_token: t, payment_id: fx.paymentId }), {
    setup: pending,
    stepUp: true,
    otherUser: S.NOT_FOUND,
    after: (_c, _o, _fx, res) => void expect((res as PaymentRes).payment.status).to.equal("PAYMENT_STATUS_APPROVED"),
  }),
  "vaultgate.budgets.v1.BudgetsService/DeclinePayment": session((t, fx: { paymentId: string }) => ({ session_token: t, payment_id: fx.paymentId }), {
    setup: pending,
    otherUser: S.NOT_FOUND,
    after: (_c, _o, _fx, res) => void expect((res as PaymentRes).payment.status).to.equal("PAYMENT_STATUS_DECLINED"),
  }),
  "vaultgate.budgets.v1.BudgetsService/DeclineBudget": session(
    (t, fx: { agentPrincipalId: string }) => ({ session_token: t, agent_principal_id: fx.agentPrincipalId }),
    {
      setup: draftBudget,
      otherUser: S.NOT_FOUND,
      after: (_c, _o, _fx, res) => void expect((res as BudgetRes).budget.status).to.equal("BUDGET_STATUS_DECLINED"),
    },
  ),
  "vaultgate.budgets.v1.BudgetsService/ListPendingApprovals": session((t) => ({ session_token: t }), {
    setup: pending,
    after: (_c, _o, fx, res) => void expect((res as PendingRes).pending_payments.map((p) => p.payment_id)).to.include(fx.paymentId),
    otherUserOk: async (c, owner, fx, res) => {
      expect((res as PendingRes).pending_payments.map((p) => p.payment_id)).to.not.include(fx.paymentId);
      expect((await pendingIds(c, owner)).payments).to.include(fx.paymentId);
    },
  }),
  // A read of the owner's own money: no step-up; another user's session sees only its own vaults.
  "vaultgate.budgets.v1.BudgetsService/GetMoneyView": session((t) => ({ session_token: t }), {
    setup: (c, owner) => c.f.fundedBudget(owner),
    after: (_c, owner, fx, res) => {
      const { vaults } = res as MoneyViewRes;
      expect(vaults.map((v) => v.vault_id)).to.deep.equal([owner.vaultId, fx.vaultId]);
      expect(vaults[1]!.balance_cents).to.equal("100000");
    },
    otherUserOk: (_c, owner, fx, res) => {
      const seen = (res as MoneyViewRes).vaults.map((v) => v.vault_id);
      expect(seen).to.have.length(1);
      expect(seen).to.not.include(owner.vaultId);
      expect(seen).to.not.include(fx.vaultId);
    },
  }),
  // Either read scope will do (accounts:read or payments:initiate), so no single scope is required.
  "vaultgate.budgets.v1.BudgetsService/GetPayment": agent((t, fx: { paymentId: string }) => ({ access_token: t, payment_id: fx.paymentId }), {
    grant: async (c, u) => {
      const p = await c.f.pendingPayment(u);
      paymentOf.set(u, p.paymentId);
      return p.agent;
    },
    setup: async (c, u) => ({ paymentId: paymentOf.get(u) ?? (await c.f.pendingPayment(u)).paymentId }),
    after: (_c, _t, _u, fx) => (res) => void expect((res as PaymentRes).payment.payment_id).to.equal(fx.paymentId),
  }),
  "vaultgate.budgets.v1.BudgetsService/GetBalance": agent((t) => ({ access_token: t }), { scope: "accounts:read" }),
  "vaultgate.budgets.v1.BudgetsService/ListGrantAudit": agent((t) => ({ access_token: t, limit: 10 }), { scope: "audit:stream" }),
  "vaultgate.budgets.v1.BudgetsService/FundBudget": agentOrSession(
    agent((t, fx: BudgetFx) => fundWire({ access_token: t }, fx), {
      scope: "agent:budget:create",
      setup: fundableBudget,
      after: (c, _t, _u, fx) => funded(c, fx),
    }),
    session((t, fx: BudgetFx) => fundWire({ session_token: t }, fx), {
      setup: fundableBudget,
      stepUp: true,
      otherUser: S.NOT_FOUND,
      after: (c, _o, fx, res) => funded(c, fx)(res),
    }),
    fundWire,
  ),
  "vaultgate.budgets.v1.BudgetsService/CloseBudget": agentOrSession(
    agent((t, fx: BudgetFx) => closeWire({ access_token: t }, fx), {
      scope: "agent:budget:create",
      setup: fundableBudget,
      after: (c, _t, _u, fx) => closed(c, fx),
    }),
    session((t, fx: BudgetFx) => closeWire({ session_token: t }, fx), {
      setup: fundableBudget,
      stepUp: true,
      otherUser: S.NOT_FOUND,
      after: (c, _o, fx, res) => closed(c, fx)(res),
    }),
    closeWire,
  ),
  "vaultgate.budgets.v1.BudgetsService/SweepBudget": agentOrSession(
    agent((t, fx: BudgetFx) => closeWire({ access_token: t }, fx), { scope: "agent:budget:create", setup: keptBudget, after: (c, _t, _u, fx) => swept(c, fx) }),
    session((t, fx: BudgetFx) => closeWire({ session_token: t }, fx), {
      setup: keptBudget,
      stepUp: true,
      otherUser: S.NOT_FOUND,
      after: (c, _o, fx, res) => swept(c, fx)(res),
    }),
    closeWire,
  ),
  "vaultgate.budgets.v1.BudgetsService/ListStrandedFunds": admin(() => ({})),
  "vaultgate.budgets.v1.BudgetsService/FundVault": admin(async (c) => ({ vault_id: (await c.f.user()).vaultId, amount_cents: "100" })),
  "vaultgate.budgets.v1.BudgetsService/ReapProvisioning": admin(() => ({})),
};
