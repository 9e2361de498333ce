import { expect } from "chai";
import { randomBytes, randomUUID } from "node:crypto";
import { ALL_AGENT_SCOPES } from "../../support/budgets.js";
import { postRpc } from "../../support/mcp.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, signIn, stepUp, type Jar } from "../../support/agent-oauth.js";

/**
 * Issue 5 gap: the owner can decline a pending payment or a draft budget from the
 * dashboard (CSRF-protected, no step-up), through BudgetsService.DeclinePayment /
 * DeclineBudget: audited once, idempotent, and a declined item can no longer be approved.
 */
describe("web pages: declining pending approvals", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  let seq = 0;
  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: ++seq, method, params }, { authorization: `Bearer ${token}` });
  const key = (p: string) => `${p}-${randomBytes(6).toString("hex")}`;

  async function token(user: { userId: string }, vaultId: string, stepUpGrant = false) {
    return (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId, scopes: ALL_AGENT_SCOPES, stepUp: stepUpGrant })).token!.accessToken;
  }

  const budgetArgs = (idempotencyKey: string) => ({
    purpose: "trip",
    display_name: "Trip budget",
    amount_cap_cents_per_tx: 10_000,
    step_up_amount_cents: 5_000,
    chain_allowlist: ["base"],
    idempotency_key: idempotencyKey,
  });
  const payArgs = (idempotencyKey: string) => ({
    counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
    amount_cents: 7_000,
    currency: "USD",
    idempotency_key: idempotencyKey,
  });

  /** A user whose agent has a payment waiting for step-up. */
  async function pendingPayment() {
    const user = await createUser(stack);
    const created = await rpc("/mcp/treasury", await token(user, user.vaultId, true), "agent.budget.create", budgetArgs(key("b")));
    const childVault = created.json!.result.vault_id as string;
    await stack.admin.budgets.fundVault({ vaultId: childVault, amountCents: 100_000n });
    const agent = await token(user, childVault);
    const args = payArgs(key("p"));
    const pending = await rpc("/mcp/write", agent, "payments.initiate", args);
    expect(pending.json!.result.kind).to.equal("pending_step_up");
    return { user, agent, args, paymentId: pending.json!.result.payment_id as string };
  }

  async function signedIn(email: string) {
    const jar = createJar(stack.url);
    await signIn(stack, jar, email);
    return jar;
  }

  const page = async (jar: Jar, path: string) => {
    const res = await jar.get(path);
    expect(res.status, path).to.equal(200);
    return res.text();
  };

  const auditRows = (action: string, subject: string) => stack.core.db("audit_records").where({ action, subject }).orderBy("seq");

  it("declines a pending payment from the dashboard list without a step-up; audited once; idempotent", async () => {
    const { user, agent, args, paymentId } = await pendingPayment();
    const jar = await signedIn(user.email);
    const action = `/dashboard/approvals/payments/${paymentId}/decline`;
    const dash = await page(jar, "/dashboard/agents");
    expect(dash).to.include(`action="${action}"`);
    const fields = formFields(dash, action);

    const declined = await jar.post(action, fields);
    expect(declined.status).to.equal(303);
    expect(declined.headers.get("location")).to.equal("/dashboard/agents");
    expect(jar.cookies.get("vg_notice")).to.match(/^payment-declined\.[\w-]{43}$/);
    const after = await page(jar, "/dashboard/agents");
    expect(after).to.include("The payment was declined. It will not be paid.");
    expect(after).to.include("Nothing is waiting for your approval");

    const rows = await auditRows("payments.decline", paymentId);
    expect(rows).to.have.length(1);
    expect(rows[0]).to.include({ actor: `user:${user.userId}`, outcome: "success", request_id: declined.headers.get("x-request-id") });

    // Idempotent: the same post again lands on the same notice and writes no second audit row.
    const again = await jar.post(action, fields);
    expect(again.headers.get("location")).to.equal("/dashboard/agents");
    expect(jar.cookies.get("vg_notice")).to.match(/^payment-declined\.[\w-]{43}$/);
    expect(await auditRows("payments.decline", paymentId)).to.have.length(1);

    // The agent's identical request is refused, and nothing was paid.
    const replay = await rpc("/mcp/write", agent, "payments.initiate", args);
    expect(replay.json!.error).to.deep.include({ code: -32002, message: "the vault owner declined this payment" });
    expect(replay.json!.error.data.reason_id).to.equal("access_denied");
    expect((await rpc("/mcp/read", agent, "accounts.balance", {})).json!.result.balance_cents).to.equal(100_000);
  });

  it("a declined payment can no longer be approved, even with a fresh step-up", async () => {
    const { user, agent, args, paymentId } = await pendingPayment();
    const review = `/dashboard/approvals/payments/${paymentId}`;
    const jar = await signedIn(user.email);
    await stepUp(stack, jar, user.email, `/stepup?return_to=${encodeURIComponent(review)}`);
    const reviewPage = await page(jar, review);
    expect(reviewPage).to.include("Decline payment");
    const approveFields = formFields(reviewPage, `${review}/approve`);
    expect((await jar.post(`${review}/decline`, formFields(reviewPage, `${review}/decline`))).status).to.equal(303);

    const approve = await jar.post(`${review}/approve`, approveFields);
    expect(approve.status).to.equal(404);
    expect(await approve.text()).to.include("Nothing to approve here");
    expect((await jar.get(review)).status).to.equal(404);
    expect(await auditRows("payments.approve", paymentId)).to.have.length(0);
    expect((await rpc("/mcp/write", agent, "payments.initiate", args)).json!.error.code).to.equal(-32002);
  });

  it("an approved payment can no longer be declined; the agent's call still completes", async () => {
    const { user, agent, args, paymentId } = await pendingPayment();
    const review = `/dashboard/approvals/payments/${paymentId}`;
    const jar = await signedIn(user.email);
    await stepUp(stack, jar, user.email, `/stepup?return_to=${encodeURIComponent(review)}`);
    const reviewPage = await page(jar, review);
    expect((await jar.post(`${review}/approve`, formFields(reviewPage, `${review}/approve`))).status).to.equal(303);
    const decline = await jar.post(`${review}/decline`, formFields(reviewPage, `${review}/decline`));
    expect(decline.status).to.equal(404);
    expect(await decline.text()).to.include("Nothing to approve here");
    expect((await rpc("/mcp/write", agent, "payments.initiate", args)).json!.result).to.deep.equal({
      kind: "accepted",
      payment_id: paymentId,
      status: "completed",
    });
  });

  it("declines a draft budget from its review page; it cannot be activated and a replay is refused", async () => {
    const user = await createUser(stack);
    const owner = await token(user, user.vaultId);
    const args = budgetArgs(key("b"));
    const draft = await rpc("/mcp/treasury", owner, "agent.budget.create", args);
    expect(draft.json!.result.status).to.equal("draft");
    const agentId = draft.json!.result.agent_principal_id as string;
    const review = `/dashboard/approvals/budgets/${agentId}`;
    const jar = await signedIn(user.email);
    await stepUp(stack, jar, user.email, `/stepup?return_to=${encodeURIComponent(review)}`);
    const reviewPage = await page(jar, review);
    const activateFields = formFields(reviewPage, `${review}/activate`);

    const declined = await jar.post(`${review}/decline`, formFields(reviewPage, `${review}/decline`));
    expect(declined.headers.get("location")).to.equal("/dashboard/agents");
    expect(await page(jar, "/dashboard/agents")).to.include("The budget was declined. It can never be activated.");
    expect(await auditRows("agent.budget.decline", agentId)).to.have.length(1);

    const activate = await jar.post(`${review}/activate`, activateFields);
    expect(activate.status).to.equal(404);
    expect(await auditRows("agent.budget.activate", agentId)).to.have.length(0);
    expect((await jar.post(`${review}/decline`, formFields(reviewPage, `${review}/decline`))).status).to.equal(303);
    expect(await auditRows("agent.budget.decline", agentId)).to.have.length(1);

    // Its card still offers Close, but no "keep the remaining funds": a declined budget keeps none.
    const money = await page(jar, "/dashboard/money");
    const card = money.slice(money.indexOf(`id="v-${draft.json!.result.vault_id}"`));
    expect(card.slice(0, card.indexOf("</section>")))
      .to.include("Close budget")
      .and.not.include("keep_funds");

    const replay = await rpc("/mcp/treasury", owner, "agent.budget.create", args);
    expect(replay.json!.error).to.deep.include({ code: -32002, message: "the vault owner declined this budget" });
    expect(replay.json!.error.data.reason_id).to.equal("access_denied");
  });

  it("refuses a decline without a valid CSRF token, for another user's item, or an unknown id", async () => {
    const { user, paymentId } = await pendingPayment();
    const action = `/dashboard/approvals/payments/${paymentId}/decline`;
    const jar = await signedIn(user.email);
    for (const form of [{}, { csrf: "forged" }] as Record<string, string>[]) {
      const res = await jar.post(action, form);
      expect(res.status).to.equal(403);
      expect(await res.text()).to.include("This form has expired");
    }
    const stranger = await createUser(stack);
    const sjar = await signedIn(stranger.email);
    const csrf = formFields(await page(sjar, "/dashboard/agents"), "/dashboard/kill-switch").csrf as string;
    for (const path of [action, `/dashboard/approvals/payments/${randomUUID()}/decline`, "/dashboard/approvals/budgets/nope/decline"]) {
      const res = await sjar.post(path, { csrf });
      expect(res.status, path).to.equal(404);
      expect(await res.text()).to.include("Nothing to approve here");
    }
    // Signed out: through sign-in, nothing decided.
    const anon = createJar(stack.url);
    const csrfPage = await page(anon, "/signin");
    const signedOut = await anon.post(action, { csrf: formFields(csrfPage, "/signin").csrf as string });
    expect(signedOut.status).to.equal(303);
    expect(signedOut.headers.get("location")).to.match(/^\/signin\?return_to=/);
    expect(await page(jar, "/dashboard/agents")).to.include(action);
    expect(await auditRows("payments.decline", paymentId)).to.have.length(0);
  });

  it("the agent's own page lists its pending payments with review and Decline", async () => {
    const { user, paymentId } = await pendingPayment();
    const jar = await signedIn(user.email);
    const agents = await stack.clients.grants.listAgents({ sessionToken: jar.cookies.get("vg_session")! });
    const payment = (await stack.clients.budgets.listPendingApprovals({ sessionToken: jar.cookies.get("vg_session")! })).pendingPayments[0]!;
    const agentId = payment.agentPrincipalId;
    expect(agents.agents.map((a) => a.agentId)).to.include(agentId);
    const text = await page(jar, `/dashboard/agents/${agentId}`);
    expect(text).to.include("Pending approvals");
    expect(text).to.include(`href="/dashboard/approvals/payments/${paymentId}"`);
    expect(text).to.include(`action="/dashboard/approvals/payments/${paymentId}/decline"`);
  });
});
