import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { ALL_AGENT_SCOPES, grantFor } from "../../support/budgets.js";
import { legsOf, expectLedgerBalanced } from "../../support/budget-life.js";
import { postRpc } from "../../support/mcp.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, signIn, stepUp, type Jar } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";
import { strandedVaults } from "../../support/stranded.js";
import { compileToolSchemas } from "../../../gateways/jsonrpc/schemas.js";
import { TOOLS } from "../../../gateways/jsonrpc/tools.js";

const MONEY = "/dashboard/money";
const validators = compileToolSchemas(TOOLS);

/**
 * Money a budget kept when it was closed with keep_funds goes back to its parent later:
 * agent.budget.sweep on /mcp/treasury and the dashboard's Sweep form, over HTTP.
 */
describe("sweeping a closed budget's kept money", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  let seq = 0;
  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: ++seq, method, params }, { authorization: `Bearer ${token}` });
  const sweep = (token: string, vaultId: string) => rpc("/mcp/treasury", token, "agent.budget.sweep", { vault_id: vaultId });
  const balances = async (...vaultIds: string[]) => {
    const rows = await stack.core.db("vaults").whereIn("id", vaultIds).select("id", "balance_cents");
    return vaultIds.map((id) => Number(rows.find((r: { id: string }) => r.id === id).balance_cents));
  };
  const stranded = () => strandedVaults(stack);

  /** A user whose root vault made a budget, funded it with $300.00 and closed it keeping the funds. */
  async function keptBudget() {
    const user = await createUser(stack);
    await stack.admin.budgets.fundVault({ vaultId: user.vaultId, amountCents: 100_000n });
    const parent = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true })).token!
      .accessToken;
    const created = await rpc("/mcp/treasury", parent, "agent.budget.create", {
      purpose: "trip",
      display_name: "Kept budget",
      chain_allowlist: ["base"],
      idempotency_key: `b-${randomBytes(6).toString("hex")}`,
    });
    const budget = { vaultId: created.json!.result.vault_id as string, agentId: created.json!.result.agent_principal_id as string };
    const funded = await rpc("/mcp/treasury", parent, "agent.budget.fund", {
      vault_id: budget.vaultId,
      amount_cents: 30_000,
      idempotency_key: `f-${randomBytes(6).toString("hex")}`,
    });
    expect(funded.json!.result, funded.text).to.include({ balance_cents: 30_000 });
    const closed = await rpc("/mcp/treasury", parent, "agent.budget.revoke", { vault_id: budget.vaultId, keep_funds: true });
    expect(closed.json!.result, closed.text).to.include({ swept_cents: 0, status: "closed" });
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([70_000, 30_000]);
    return { user, parent, budget };
  }

  it("agent.budget.sweep moves the kept money back as one balanced, audited transaction; again it moves nothing and says so", async () => {
    const { user, parent, budget } = await keptBudget();
    expect(await stranded()).to.include(budget.vaultId);
    const res = await sweep(parent, budget.vaultId);
    const r = res.json!.result;
    expect(r, res.text).to.deep.include({
      vault_id: budget.vaultId,
      parent_vault_id: user.vaultId,
      swept_cents: 30_000,
      currency: "USD",
      nothing_to_sweep: false,
    });
    expect(validators.get("agent.budget.sweep")!.output(r)).to.equal(true);
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([100_000, 0]);
    expect(await legsOf(stack, r.transfer_id)).to.deep.equal({ kind: "budget.sweep", legs: { [budget.vaultId]: -30_000, [user.vaultId]: 30_000 } });
    const audit = await stack.core.db("audit_records").where({ action: "agent.budget.sweep", subject: budget.vaultId });
    expect(audit.map((a) => [a.outcome, a.reason])).to.deep.equal([["success", ""]]);
    expect(await stranded()).to.not.include(budget.vaultId);
    await expectLedgerBalanced(stack);
    // Idempotent: nothing is left, nothing moves, and the answer says so (tools/call too).
    const again = await rpc("/mcp/treasury", parent, "tools/call", { name: "agent.budget.sweep", arguments: { vault_id: budget.vaultId } });
    expect(again.json!.result.isError, again.text).to.equal(false);
    expect(again.json!.result.structuredContent).to.deep.equal({
      vault_id: budget.vaultId,
      parent_vault_id: user.vaultId,
      swept_cents: 0,
      currency: "USD",
      transfer_id: null,
      nothing_to_sweep: true,
    });
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([100_000, 0]);
  });

  it("what the budgets closed with it kept comes up too, deepest first", async () => {
    const user = await createUser(stack);
    await stack.admin.budgets.fundVault({ vaultId: user.vaultId, amountCents: 100_000n });
    const parent = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true })).token!
      .accessToken;
    const create = async (token: string) =>
      (
        await rpc("/mcp/treasury", token, "agent.budget.create", {
          purpose: "trip",
          display_name: "Level",
          chain_allowlist: ["base"],
          idempotency_key: `b-${randomBytes(6).toString("hex")}`,
        })
      ).json!.result;
    const child = await create(parent);
    const childAgent = await grantFor(stack, { userId: user.userId, vaultId: child.vault_id, agentPrincipalId: child.agent_principal_id }, { stepUp: true });
    const grandchild = await create(childAgent);
    await rpc("/mcp/treasury", parent, "agent.budget.fund", {
      vault_id: child.vault_id,
      amount_cents: 10_000,
      idempotency_key: `f-${randomBytes(6).toString("hex")}`,
    });
    await rpc("/mcp/treasury", childAgent, "agent.budget.fund", {
      vault_id: grandchild.vault_id,
      amount_cents: 4_000,
      idempotency_key: `f-${randomBytes(6).toString("hex")}`,
    });
    await rpc("/mcp/treasury", parent, "agent.budget.revoke", { vault_id: child.vault_id, keep_funds: true });
    expect(await stranded()).to.include.members([child.vault_id, grandchild.vault_id]);
    const res = await sweep(parent, child.vault_id);
    expect(res.json!.result, res.text).to.include({ swept_cents: 10_000 });
    expect(await balances(user.vaultId, child.vault_id, grandchild.vault_id)).to.deep.equal([100_000, 0, 0]);
    expect(await stranded()).to.not.include.members([child.vault_id]);
    expect(await stranded()).to.not.include(grandchild.vault_id);
    await expectLedgerBalanced(stack);
  });

  it("hostile callers cannot sweep: another user's grant, the budget's own grant, a grant without the scope; an open budget is not swept", async () => {
    const { user, budget } = await keptBudget();
    const stranger = await createUser(stack);
    const strangerToken = (await stack.admin.grants.issueGrant({ userId: stranger.userId, vaultId: stranger.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true }))
      .token!.accessToken;
    const other = await sweep(strangerToken, budget.vaultId);
    expect([other.json!.error?.code, other.json!.error?.data?.reason_id]).to.deep.equal([-32602, "not_found"]);
    // The budget's own grant (issued before the close, revoked by it; one written now is still on the wrong vault).
    const own = await grantFor(stack, { userId: user.userId, vaultId: budget.vaultId, agentPrincipalId: budget.agentId }, { stepUp: true });
    const self = await sweep(own, budget.vaultId);
    expect([self.json!.error?.code, self.json!.error?.data?.reason_id]).to.deep.equal([-32002, "grant_required"]);
    const readOnly = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ["accounts:read"] })).token!.accessToken;
    const scoped = await sweep(readOnly, budget.vaultId);
    expect(scoped.json!.error?.data?.reason_id).to.equal("insufficient_scope");
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([70_000, 30_000]);
    // An open budget: close it instead.
    const open = await createUser(stack);
    const openParent = (await stack.admin.grants.issueGrant({ userId: open.userId, vaultId: open.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true })).token!
      .accessToken;
    const active = (
      await rpc("/mcp/treasury", openParent, "agent.budget.create", {
        purpose: "trip",
        display_name: "Open",
        chain_allowlist: ["base"],
        idempotency_key: `b-${randomBytes(6).toString("hex")}`,
      })
    ).json!.result;
    const refused = await sweep(openParent, active.vault_id);
    expect([refused.json!.error?.code, refused.json!.error?.data?.reason_id]).to.deep.equal([-32002, "access_denied"]);
    const failures = await stack.core
      .db("audit_records")
      .where({ action: "agent.budget.sweep", outcome: "failure" })
      .whereIn("subject", [budget.vaultId, active.vault_id]);
    expect(failures.map((f) => f.reason).sort()).to.deep.equal(["access_denied", "grant_required", "not_found"]);
  });

  async function steppedUp(jar: Jar, email: string) {
    const res = await stepUp(stack, jar, email, `/stepup?return_to=${encodeURIComponent(MONEY)}`);
    expect(res.status).to.equal(303);
  }

  it("the dashboard's Sweep form (CSRF, fresh step-up) moves the kept money once; another user's session cannot", async () => {
    const { user, budget } = await keptBudget();
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email, MONEY);
    const path = `${MONEY}/budgets/${budget.vaultId}/sweep`;
    let text = await (await jar.get(MONEY)).text();
    expect(text).to.include(`action="${path}"`);
    expect(text).to.include("Move $300.00 back to Your vault");
    const form = formFields(text, path);
    // A forged CSRF token is refused; without a fresh step-up the owner goes through it first.
    expect((await jar.post(path, { ...form, csrf: "forged" })).status).to.equal(403);
    const detour = await jar.post(path, form);
    expect(detour.status).to.equal(303);
    expect(detour.headers.get("location")).to.match(/^\/stepup\?return_to=/);
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([70_000, 30_000]);
    // Another user's stepped-up session cannot sweep it.
    const stranger = await createUser(stack);
    const sjar = createJar(stack.url);
    await signIn(stack, sjar, stranger.email, MONEY);
    await steppedUp(sjar, stranger.email);
    const strangerFields = { csrf: formFields(await (await sjar.get(MONEY)).text(), "/signout").csrf as string, return_to: MONEY };
    expect((await sjar.post(path, strangerFields)).status).to.equal(404);
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([70_000, 30_000]);

    await steppedUp(jar, user.email);
    const done = await jar.post(path, form);
    expect(done.status).to.equal(303);
    expect(done.headers.get("location")).to.equal(`${MONEY}#v-${budget.vaultId}`);
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([100_000, 0]);
    text = await (await jar.get(MONEY)).text();
    expect(text).to.include("The money the closed budget kept went back to the vault it came from.");
    expect(text).to.not.include(`action="${path}"`);
    // The same form again moves nothing and says so.
    const again = await jar.post(path, form);
    expect(again.headers.get("location")).to.equal(`${MONEY}#v-${budget.vaultId}`);
    expect(jar.cookies.get("vg_notice")).to.match(/^nothing-to-sweep\.[\w-]{43}$/);
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([100_000, 0]);
    await expectLedgerBalanced(stack);
  });

  it("concurrent sweeps by the agent and the owner move the money once (PostgreSQL)", async function () {
    requirePostgres(this, "concurrent sweeps need several connections");
    for (let round = 0; round < 3; round++) {
      const { user, parent, budget } = await keptBudget();
      const jar = createJar(stack.url);
      await signIn(stack, jar, user.email, MONEY);
      await steppedUp(jar, user.email);
      const path = `${MONEY}/budgets/${budget.vaultId}/sweep`;
      const form = formFields(await (await jar.get(MONEY)).text(), path);
      const [tools, forms] = await Promise.all([
        Promise.all(Array.from({ length: 6 }, () => sweep(parent, budget.vaultId))),
        Promise.all([jar.post(path, form), jar.post(path, form)]),
      ]);
      const moved = tools.filter((a) => a.json!.result?.nothing_to_sweep === false);
      const swept = forms.filter((a) => a.headers.getSetCookie().some((c) => c.startsWith("vg_notice=swept.")));
      expect(moved.length + swept.length, "exactly one sweep moved money").to.equal(1);
      expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([100_000, 0]);
      const sweeps = await stack.core.db("ledger_transactions").where({ kind: "budget.sweep", reference: `budget:${budget.vaultId}` });
      expect(sweeps).to.have.length(1);
    }
    await expectLedgerBalanced(stack);
  });
});
