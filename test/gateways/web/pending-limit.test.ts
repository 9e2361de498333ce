import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, createOwner, grantFor, ownerSession, type TestOwner } from "../../support/budgets.js";
import { postRpc } from "../../support/mcp.js";
import { requirePostgres } from "../../support/db.js";
import { createJar, createUser, signIn } from "../../support/agent-oauth.js";
import { expectJsonRpcError } from "../../support/refusals.js";

/**
 * A vault holds at most 50 payments awaiting approval and draft budgets together; past
 * that the agent is refused -32002 policy_denied with limit pending_approvals.
 */
describe("Pending approvals per vault: the bound", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 }, provisioningLimitPerMinute: 1_000_000 });
  });
  after(() => stack.close());

  /** An active budget (step-up above $50) holding $1,000, and its own agent's token. */
  async function budgetAgent() {
    const owner = await createOwner(stack);
    const { budget } = await stack.clients.budgets.createBudget({
      accessToken: await grantFor(stack, owner, { stepUp: true }),
      ...budgetParams({ stepUpAmountCents: 5_000n, amountCapCentsPerTx: undefined, amountCapCentsPerDay: undefined, amountCapCentsLifetime: undefined }),
    });
    await stack.admin.budgets.fundVault({ vaultId: budget!.vaultId, amountCents: 100_000n });
    const child: TestOwner = { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId };
    return { owner, child, token: await grantFor(stack, child) };
  }

  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
  const pay = (token: string, amount = 6_000) =>
    rpc("/mcp/write", token, "payments.initiate", {
      counterparty: { address: "0xabc0000000000000000000000000000000000009", chain: "base", token: "USDC" },
      amount_cents: amount,
      currency: "USD",
      idempotency_key: `pay-${randomBytes(8).toString("hex")}`,
    });
  const createDraft = (token: string) =>
    rpc("/mcp/treasury", token, "agent.budget.create", {
      purpose: "trip",
      display_name: "Sub budget",
      chain_allowlist: ["base"],
      idempotency_key: `sub-${randomBytes(8).toString("hex")}`,
    });
  const pendingOf = async (vaultId: string) =>
    Number((await stack.core.db("agent_payments").where({ vault_id: vaultId, status: "pending_step_up" }).count("* as n"))[0]!.n);

  function expectRefused(res: Awaited<ReturnType<typeof pay>>) {
    const error = expectJsonRpcError(res, -32002, "policy_denied");
    expect(error.data).to.include({ limit: "pending_approvals" });
    expect(error.message).to.match(/^pending_approvals: the vault already has 50 payments and draft budgets waiting for its owner/);
  }

  it("the 51st payment awaiting approval is refused with policy_denied pending_approvals; payments that need no approval still complete", async () => {
    const { child, token } = await budgetAgent();
    for (let i = 0; i < 50; i++) expect((await pay(token)).json!.result, "pending").to.include({ kind: "pending_step_up" });
    const refused = await pay(token);
    expectRefused(refused);
    expect(await pendingOf(child.vaultId)).to.equal(50);
    const audit = await stack.core.db("audit_records").where({ action: "payments.initiate", outcome: "failure", subject: child.vaultId });
    expect(audit.map((a) => a.reason)).to.deep.equal(["policy_denied:pending_approvals"]);
    expect((await pay(token, 1_000)).json!.result).to.include({ kind: "accepted" });
    // Once the owner declines one, there is room again.
    const [first] = await stack.core.db("agent_payments").where({ vault_id: child.vaultId, status: "pending_step_up" }).limit(1);
    await stack.clients.budgets.declinePayment({ sessionToken: await ownerSession(stack, child.userId), paymentId: first.id });
    expect((await pay(token)).json!.result).to.include({ kind: "pending_step_up" });
    expectRefused(await pay(token));
  });

  it("payments.simulate answers as initiate would when the vault is full: denied by pending_approvals", async () => {
    const { child, token } = await budgetAgent();
    const simulate = async (amount: number) => {
      const res = await rpc("/mcp/write", token, "payments.simulate", {
        counterparty: { address: "0xabc0000000000000000000000000000000000009", chain: "base", token: "USDC" },
        amount_cents: amount,
        currency: "USD",
        idempotency_key: `sim-${randomBytes(8).toString("hex")}`,
      });
      expect(res.json!.result, JSON.stringify(res.json)).to.be.an("object");
      return res.json!.result as { outcome: string; rule: string | null; broken_rules: { reason_id: string }[] };
    };
    for (let i = 0; i < 49; i++) await pay(token);
    expect(await simulate(6_000)).to.deep.include({ outcome: "pending_step_up", rule: "step_up_amount" });
    await pay(token);
    const full = await simulate(6_000);
    expect(full).to.deep.include({ outcome: "denied", rule: "pending_approvals" });
    expect(full.broken_rules.map((r) => r.reason_id)).to.deep.equal(["step_up_amount", "pending_approvals"]);
    expectRefused(await pay(token));
    // A payment that needs no approval is not limited, in simulate as in initiate.
    expect(await simulate(1_000)).to.deep.include({ outcome: "accepted", rule: null });
    expect(await pendingOf(child.vaultId)).to.equal(50);
  });

  it("draft budgets count in the same 50: drafts and pending payments together", async () => {
    const { child, token } = await budgetAgent();
    for (let i = 0; i < 48; i++) expect((await pay(token)).json!.result).to.include({ kind: "pending_step_up" });
    // A grant on the budget's vault without step-up makes drafts under it.
    const maker = await grantFor(stack, child);
    for (let i = 0; i < 2; i++) {
      const made = await createDraft(maker);
      expect(made.json!.result, made.text).to.include({ status: "draft" });
    }
    const tooMany = await createDraft(maker);
    expectRefused(tooMany);
    // Refused before any provisioning work, and audited with the limit's name.
    expect(tooMany.json!.error.message).to.equal("pending_approvals: the vault already has 50 payments and draft budgets waiting for its owner");
    const audited = await stack.core.db("audit_records").where({ action: "agent.budget.create", outcome: "failure", subject: child.vaultId });
    expect(audited.map((a) => a.reason)).to.deep.equal(["policy_denied:pending_approvals"]);
    expect(await stack.core.db("budgets").where({ parent_vault_id: child.vaultId })).to.have.length(2);
    expect(await stack.core.db("budgets").where({ parent_vault_id: child.vaultId, status: "draft" })).to.have.length(2);
    expect(await stack.core.db("vaults").where({ parent_vault_id: child.vaultId })).to.have.length(2);
    expectRefused(await pay(token));
    // A step-up grant's budget is active at once and waits for nobody.
    expect((await createDraft(await grantFor(stack, child, { stepUp: true }))).json!.result).to.include({ status: "active" });
  });

  it("60 concurrent payments over the step-up amount leave exactly 50 pending and refuse 10 (PostgreSQL)", async function () {
    requirePostgres(this, "concurrent payments need several connections");
    const { child, token } = await budgetAgent();
    const answers = await Promise.all(Array.from({ length: 60 }, () => pay(token)));
    const pending = answers.filter((a) => a.json!.result?.kind === "pending_step_up");
    const refused = answers.filter((a) => a.json!.error);
    expect(pending).to.have.length(50);
    expect(refused).to.have.length(10);
    for (const r of refused) expectRefused(r);
    expect(await pendingOf(child.vaultId)).to.equal(50);
  });

  it("concurrent drafts and payments on one vault never pass 50 together (PostgreSQL)", async function () {
    requirePostgres(this, "concurrent calls need several connections");
    const { child, token } = await budgetAgent();
    for (let i = 0; i < 40; i++) await pay(token);
    const maker = await grantFor(stack, child);
    // Drafts on one vault are one saga at a time (contention); retry until each is answered.
    const draft = async () => {
      for (;;) {
        const res = await createDraft(maker);
        if (res.json!.error?.data?.reason_id !== "vault_contention") return res;
      }
    };
    await Promise.all([...Array.from({ length: 15 }, () => pay(token)), ...Array.from({ length: 5 }, draft)]);
    const drafts = await stack.core.db("budgets").where({ parent_vault_id: child.vaultId, status: "draft" });
    expect((await pendingOf(child.vaultId)) + drafts.length).to.equal(50);
  });
});

/** The dashboard lists at most 20 pending payments and 20 draft budgets per page, and pages the rest. */
describe("Pending approvals on the dashboard: pages of 20", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 }, provisioningLimitPerMinute: 1_000_000 });
  });
  after(() => stack.close());

  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
  const ids = (text: string, what: "payments" | "budgets") =>
    [...text.matchAll(new RegExp(`href="/dashboard/approvals/${what}/([0-9a-f-]{36})"`, "g"))].map((m) => m[1]!);
  const nextLink = (text: string, what: string) =>
    [...text.matchAll(/<a rel="next" href="([^"]+)">Next (\w+) →<\/a>/g)].find((m) => m[2] === what)?.[1]?.replaceAll("&amp;", "&");

  it("25 payments and 23 drafts: 20 of each, next links to the rest, every item once; a forged or foreign cursor is a 400 page", async () => {
    const user = await createUser(stack);
    const issued = await stack.admin.grants.issueGrant({
      userId: user.userId,
      vaultId: user.vaultId,
      scopes: ["agent:budget:create", "payments:initiate"],
      stepUp: true,
    });
    const parent = issued.token!.accessToken;
    const created = await rpc("/mcp/treasury", parent, "agent.budget.create", {
      purpose: "trip",
      display_name: "Spender",
      step_up_amount_cents: 100,
      chain_allowlist: ["base"],
      idempotency_key: `s-${randomBytes(6).toString("hex")}`,
    });
    const vaultId = created.json!.result.vault_id as string;
    await stack.admin.budgets.fundVault({ vaultId, amountCents: 1_000_000n });
    const agent = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId, scopes: ["payments:initiate", "agent:budget:create"] })).token!
      .accessToken;
    for (let i = 0; i < 25; i++) {
      stack.clock.advance(1_000);
      const res = await rpc("/mcp/write", agent, "payments.initiate", {
        counterparty: { address: "0xabc0000000000000000000000000000000000009", chain: "base", token: "USDC" },
        amount_cents: 500,
        currency: "USD",
        idempotency_key: `p-${randomBytes(6).toString("hex")}`,
      });
      expect(res.json!.result, res.text).to.include({ kind: "pending_step_up" });
    }
    for (let i = 0; i < 23; i++) {
      stack.clock.advance(1_000);
      const res = await rpc("/mcp/treasury", agent, "agent.budget.create", {
        purpose: "trip",
        display_name: `Draft ${i}`,
        chain_allowlist: ["base"],
        idempotency_key: `d-${randomBytes(6).toString("hex")}`,
      });
      expect(res.json!.result, res.text).to.include({ status: "draft" });
    }
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email, "/dashboard/agents");
    const first = await (await jar.get("/dashboard/agents")).text();
    const [p1, b1] = [ids(first, "payments"), ids(first, "budgets")];
    expect([p1.length, b1.length]).to.deep.equal([20, 20]);
    const morePayments = nextLink(first, "payments")!;
    const moreBudgets = nextLink(first, "budgets")!;
    expect(morePayments).to.match(/^\/dashboard\/agents\?payments_after=/);
    expect(moreBudgets).to.match(/^\/dashboard\/agents\?budgets_after=/);

    const second = await jar.get(morePayments);
    expect(second.status).to.equal(200);
    const secondText = await second.text();
    const p2 = ids(secondText, "payments");
    expect(p2).to.have.length(5);
    expect(new Set([...p1, ...p2]).size).to.equal(25);
    const all = await stack.core.db("agent_payments").where({ vault_id: vaultId, status: "pending_step_up" }).pluck("id");
    expect([...p1, ...p2].sort()).to.deep.equal([...all].sort());
    expect(nextLink(secondText, "payments")).to.equal(undefined);
    expect(ids(secondText, "budgets")).to.deep.equal(b1); // the other list stays where it was
    expect(secondText).to.include(`href="/dashboard/agents">Back to the first approvals`);

    const b2 = ids(await (await jar.get(moreBudgets)).text(), "budgets");
    expect(b2).to.have.length(3);
    expect(new Set([...b1, ...b2]).size).to.equal(23);

    // The money view pages the same way, and so does the page of the agent asking for the payments.
    const money = await (await jar.get("/dashboard/money")).text();
    expect(nextLink(money, "payments")).to.match(/^\/dashboard\/money\?payments_after=/);
    const [payer] = await stack.core.db("agent_payments").where({ vault_id: vaultId }).distinct().pluck("agent_principal_id");
    // Counted in its pending section: the budget's card above it lists its recent payments too.
    const pendingPart = (text: string) => text.slice(text.indexOf("<h2>Pending approvals</h2>"));
    const agentPage = pendingPart(await (await jar.get(`/dashboard/agents/${payer}`)).text());
    const a1 = ids(agentPage, "payments");
    expect(a1).to.have.length(20);
    expect(ids(agentPage, "budgets"), "the drafts are their own agents'").to.deep.equal([]);
    const agentNext = nextLink(agentPage, "payments")!;
    expect(agentNext).to.match(new RegExp(`^/dashboard/agents/${payer}\\?payments_after=`));
    const a2 = ids(pendingPart(await (await jar.get(agentNext)).text()), "payments");
    expect([...a1, ...a2].sort()).to.deep.equal([...all].sort());

    // A changed cursor, garbage, or another user's cursor: a 400 page, nothing listed.
    const cursor = new URL(morePayments, stack.url).searchParams.get("payments_after")!;
    const [body, mac] = cursor.split(".");
    for (const bad of [`${body}x.${mac}`, "garbage", `${body}.${mac!.slice(1)}A`]) {
      const res = await jar.get(`/dashboard/agents?payments_after=${encodeURIComponent(bad)}`);
      expect(res.status, bad).to.equal(400);
      expect(await res.text()).to.include("This page link cannot be used");
    }
    const stranger = await createUser(stack);
    const sjar = createJar(stack.url);
    await signIn(stack, sjar, stranger.email, "/dashboard/agents");
    const foreign = await sjar.get(morePayments);
    expect(foreign.status).to.equal(400);
  });
});
