import { expect } from "chai";
import { randomBytes, randomUUID } from "node:crypto";
import { ALL_AGENT_SCOPES } from "../../support/budgets.js";
import { postRpc } from "../../support/mcp.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, pkce, REDIRECT, registerClient, signIn, stepUp, type Jar } from "../../support/agent-oauth.js";

/**
 * Pending approvals on the dashboard: draft budgets and payments waiting
 * for step-up, approved through the real pages after a fresh e-mail step-up, and the
 * agent's identical JSON-RPC call completing afterwards. Real grant tokens (IssueGrant).
 */
describe("web pages: pending approvals (draft budgets, step-up payments)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  let seq = 0;
  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: ++seq, method, params }, { authorization: `Bearer ${token}` });

  async function token(user: { userId: string; vaultId: string }, vaultId = user.vaultId, stepUpGrant = false) {
    const res = await stack.admin.grants.issueGrant({ userId: user.userId, vaultId, scopes: ALL_AGENT_SCOPES, stepUp: stepUpGrant });
    return res.token!.accessToken;
  }

  const budgetArgs = (key: string, overrides: Record<string, unknown> = {}) => ({
    purpose: "trip",
    display_name: "Trip <Lisbon> & co",
    amount_cap_cents_per_tx: 10_000,
    amount_cap_cents_per_day: 20_000,
    amount_cap_cents_lifetime: 50_000,
    step_up_amount_cents: 5_000,
    chain_allowlist: ["base", "eth"],
    idempotency_key: key,
    ...overrides,
  });

  const payArgs = (key: string, amount = 7_000) => ({
    counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
    amount_cents: amount,
    currency: "USD",
    idempotency_key: key,
  });

  /** A user with an active, funded child budget and a real grant on the child vault. */
  async function fundedBudget() {
    const user = await createUser(stack);
    const owner = await token(user, user.vaultId, true);
    const created = await rpc("/mcp/treasury", owner, "agent.budget.create", budgetArgs(`b-${randomBytes(6).toString("hex")}`));
    expect(created.json!.result.status).to.equal("active");
    const childVault = created.json!.result.vault_id as string;
    await stack.admin.budgets.fundVault({ vaultId: childVault, amountCents: 100_000n });
    return { user, childVault, agent: await token(user, childVault) };
  }

  async function signedIn(email: string) {
    const jar = createJar(stack.url);
    await signIn(stack, jar, email);
    return jar;
  }

  /** Posts the first form to `action` on the page at `path`. */
  async function submit(jar: Jar, path: string, action: string) {
    const res = await jar.get(path);
    expect(res.status).to.equal(200);
    return jar.post(action, formFields(await res.text(), action));
  }

  it("a payment's step_up_url: sign-in, step-up, approve; the same JSON-RPC call then completes", async () => {
    const { user, agent } = await fundedBudget();
    const args = payArgs(`p-${randomBytes(6).toString("hex")}`);
    const pending = await rpc("/mcp/write", agent, "payments.initiate", args);
    expect(pending.json!.result.kind).to.equal("pending_step_up");
    const paymentId = pending.json!.result.payment_id as string;
    const stepUpUrl = new URL(pending.json!.result.step_up_url as string);
    expect(stepUpUrl.origin).to.equal(stack.url);

    // Signed out: the link leads through sign-in back to the payment's review page.
    const jar = createJar(stack.url);
    const linked = await jar.get(stepUpUrl.pathname + stepUpUrl.search);
    expect(linked.status).to.equal(303);
    const review = `/dashboard/approvals/payments/${paymentId}`;
    expect(linked.headers.get("location")).to.equal(review);
    const toSignIn = await jar.get(review);
    expect(toSignIn.headers.get("location")).to.equal(`/signin?return_to=${encodeURIComponent(review)}`);
    const back = await signIn(stack, jar, user.email, review);
    expect(back.headers.get("location")).to.equal(review);

    const page = await jar.get(review);
    const text = await page.text();
    expect(text).to.include("$70.00");
    expect(text).to.include("0xabc0000000000000000000000000000000000001");
    expect(text).to.include("on <strong>base</strong>");
    expect(text).to.include("USDC");
    expect(text).to.not.include("<script");

    // Signed in without a fresh step-up: approving goes through the step-up page first.
    const first = await jar.post(`${review}/approve`, formFields(text, `${review}/approve`));
    expect(first.status).to.equal(303);
    const stepUpAt = first.headers.get("location")!;
    expect(stepUpAt).to.equal(`/stepup?return_to=${encodeURIComponent(review)}`);
    expect((await rpc("/mcp/write", agent, "payments.initiate", args)).json!.result.kind).to.equal("pending_step_up");
    const stepped = await stepUp(stack, jar, user.email, stepUpAt);
    expect(stepped.headers.get("location")).to.equal(review);

    const approved = await submit(jar, review, `${review}/approve`);
    expect(approved.status).to.equal(303);
    expect(approved.headers.get("location")).to.equal("/dashboard/agents");
    expect(await (await jar.get("/dashboard/agents")).text()).to.include("The payment was approved");

    const done = await rpc("/mcp/write", agent, "payments.initiate", args);
    expect(done.json!.result).to.deep.equal({ kind: "accepted", payment_id: paymentId, status: "completed" });
    const balance = await rpc("/mcp/read", agent, "accounts.balance", {});
    expect(balance.json!.result.balance_cents).to.equal(93_000);
    // Decided: the review page now says there is nothing to approve.
    const after = await jar.get(review);
    expect(after.status).to.equal(404);
    expect(await after.text()).to.include("Nothing to approve here");
  });

  it("a draft budget is listed in words, activated after step-up, and reads back active on replay", async () => {
    const user = await createUser(stack);
    const owner = await token(user);
    const key = `b-${randomBytes(6).toString("hex")}`;
    const args = budgetArgs(key, { time_window_end: "2030-01-31T12:00:00Z" });
    const draft = await rpc("/mcp/treasury", owner, "agent.budget.create", args);
    expect([draft.json!.result.status, draft.json!.result.policy_version]).to.deep.equal(["draft", 0]);
    const agentId = draft.json!.result.agent_principal_id as string;

    const jar = await signedIn(user.email);
    const dash = await (await jar.get("/dashboard/agents")).text();
    expect(dash).to.not.include("Nothing is waiting for your approval");
    expect(dash).to.include("Trip &lt;Lisbon&gt; &amp; co");
    expect(dash).to.not.include("Trip <Lisbon>");
    for (const words of [
      "At most $100.00 per payment",
      "At most $200.00 per day",
      "At most $500.00 in total",
      "Payments over $50.00 wait for your approval",
      "Only on chains: base, eth",
      "Until 2030-01-31 12:00 UTC",
      "Purpose: trip",
    ]) {
      expect(dash).to.include(words);
    }
    const review = `/dashboard/approvals/budgets/${agentId}`;
    expect(dash).to.include(`href="${review}"`);

    const first = await submit(jar, review, `${review}/activate`);
    expect(first.headers.get("location")).to.equal(`/stepup?return_to=${encodeURIComponent(review)}`);
    await stepUp(stack, jar, user.email, first.headers.get("location")!);
    const activated = await submit(jar, review, `${review}/activate`);
    expect(activated.headers.get("location")).to.equal("/dashboard/agents");
    const after = await (await jar.get("/dashboard/agents")).text();
    expect(after).to.include("Nothing is waiting for your approval");
    expect(after).to.include("The budget is active.");

    const replay = await rpc("/mcp/treasury", owner, "agent.budget.create", args);
    expect(replay.json!.result).to.include({ agent_principal_id: agentId, status: "active", policy_version: 1 });
  });

  it("a draft budget's largest caps read to the cent on its review page", async () => {
    const user = await createUser(stack);
    const max = Number.MAX_SAFE_INTEGER;
    const args = budgetArgs(`b-${randomBytes(6).toString("hex")}`, {
      amount_cap_cents_per_tx: max,
      amount_cap_cents_per_day: max,
      amount_cap_cents_lifetime: max,
      step_up_amount_cents: max - 1,
    });
    const draft = await rpc("/mcp/treasury", await token(user), "agent.budget.create", args);
    expect(draft.json!.result.status).to.equal("draft");
    const jar = await signedIn(user.email);
    const res = await jar.get(`/dashboard/approvals/budgets/${draft.json!.result.agent_principal_id}`);
    expect(res.status).to.equal(200);
    const page = await res.text();
    for (const words of [
      "At most $90,071,992,547,409.91 per payment",
      "At most $90,071,992,547,409.91 per day",
      "At most $90,071,992,547,409.91 in total",
      "Payments over $90,071,992,547,409.90 wait for your approval",
    ]) {
      expect(page).to.include(words);
    }
  });

  it("a step-up older than 10 minutes is asked for again", async () => {
    const user = await createUser(stack);
    const draft = await rpc("/mcp/treasury", await token(user), "agent.budget.create", budgetArgs(`b-${randomBytes(6).toString("hex")}`));
    const review = `/dashboard/approvals/budgets/${draft.json!.result.agent_principal_id}`;
    const jar = await signedIn(user.email);
    await stepUp(stack, jar, user.email, `/stepup?return_to=${encodeURIComponent(review)}`);
    const page = await (await jar.get(review)).text();
    expect(page).to.include("You confirmed it's you a moment ago");
    stack.clock.advance(601_000);
    const late = await jar.post(`${review}/activate`, formFields(page, `${review}/activate`));
    expect(late.headers.get("location")).to.equal(`/stepup?return_to=${encodeURIComponent(review)}`);
    expect(await (await jar.get("/dashboard/agents")).text()).to.include(`href="${review}"`);
  });

  it("another user's, unknown and malformed ids all get the same not-found page", async () => {
    const { user, agent } = await fundedBudget();
    const pending = await rpc("/mcp/write", agent, "payments.initiate", payArgs(`p-${randomBytes(6).toString("hex")}`));
    const paymentId = pending.json!.result.payment_id as string;
    const draft = await rpc("/mcp/treasury", await token(user), "agent.budget.create", budgetArgs(`b-${randomBytes(6).toString("hex")}`));
    const budgetAgent = draft.json!.result.agent_principal_id as string;

    const stranger = await createUser(stack);
    const jar = await signedIn(stranger.email);
    await stepUp(stack, jar, stranger.email, "/stepup?return_to=%2Fdashboard%2Fagents");
    const dash = await (await jar.get("/dashboard/agents")).text();
    expect(dash).to.include("Nothing is waiting for your approval");
    expect(dash).to.not.include(paymentId);

    const pages: string[] = [];
    for (const path of [
      `/dashboard/approvals/payments/${paymentId}`,
      `/dashboard/approvals/payments/${randomUUID()}`,
      `/dashboard/approvals/payments/not-a-uuid'"<x>`,
      `/dashboard/approvals/budgets/${budgetAgent}`,
      `/dashboard/approvals/budgets/${randomUUID()}`,
      `/dashboard/approvals/budgets/%3Cb%3E`,
      `/dashboard/agents?payment=<script>`,
      `/dashboard/agents/${randomUUID()}?payment=x`,
    ]) {
      const res = await jar.get(path);
      expect(res.status, path).to.equal(404);
      const text = await res.text();
      expect(text, path).to.include("Nothing to approve here");
      expect(text, path).to.not.match(/at \S+\.(ts|js):\d+|Error:|<script>/);
      pages.push(text.replace(/payment|budget/g, "item"));
    }
    // Undecodable, or a NUL byte: refused before routing (400, no internals).
    for (const bad of ["/dashboard/approvals/budgets/%ff%fe", "/dashboard/approvals/budgets/%3Cb%3E%00"]) {
      const garbled = await jar.get(bad);
      expect(garbled.status, bad).to.equal(400);
      expect(await garbled.text()).to.not.match(/at \S+\.(ts|js):\d+/);
    }
    // A stranger's real ids and unknown ids render the very same page.
    expect(pages[0]).to.equal(pages[1]);
    expect(pages[3]).to.equal(pages[4]);

    const form = { csrf: formFields(dash, "/dashboard/kill-switch").csrf as string };
    for (const path of [
      `/dashboard/approvals/payments/${paymentId}/approve`,
      `/dashboard/approvals/payments/${randomUUID()}/approve`,
      `/dashboard/approvals/budgets/${budgetAgent}/activate`,
      `/dashboard/approvals/budgets/nope/activate`,
    ]) {
      const res = await jar.post(path, form);
      expect(res.status, path).to.equal(404);
      expect(await res.text(), path).to.include("Nothing to approve here");
    }
    // Still pending for the owner.
    const ownerJar = await signedIn(user.email);
    const ownerDash = await (await ownerJar.get("/dashboard/agents")).text();
    expect(ownerDash).to.include(`/dashboard/approvals/payments/${paymentId}`);
    expect(ownerDash).to.include(`/dashboard/approvals/budgets/${budgetAgent}`);
  });

  it("approval forms need the CSRF token and a session", async () => {
    const { user, agent } = await fundedBudget();
    const pending = await rpc("/mcp/write", agent, "payments.initiate", payArgs(`p-${randomBytes(6).toString("hex")}`));
    const review = `/dashboard/approvals/payments/${pending.json!.result.payment_id}`;
    const jar = await signedIn(user.email);
    await stepUp(stack, jar, user.email, `/stepup?return_to=${encodeURIComponent(review)}`);
    for (const csrf of [undefined, "forged", formFields(await (await createJar(stack.url).get("/signin")).text(), "/signin").csrf as string]) {
      const res = await jar.post(`${review}/approve`, csrf === undefined ? {} : { csrf });
      expect(res.status).to.equal(403);
      expect(await res.text()).to.include("This form has expired");
    }
    const anonymous = createJar(stack.url);
    const signinPage = await (await anonymous.get("/signin")).text();
    const res = await anonymous.post(`${review}/approve`, { csrf: formFields(signinPage, "/signin").csrf as string });
    expect(res.status).to.equal(303);
    expect(res.headers.get("location")).to.equal(`/signin?return_to=${encodeURIComponent(review)}`);
    // Nothing was approved.
    expect(await (await jar.get(review)).text()).to.include("Approve payment");
  });

  it("a name an agent or a client chose before such names were refused is isolated on every page, so its bidi override reorders nothing around it", async () => {
    // U+202E turns the rest of its paragraph right to left unless something closes it. Such names
    // are refused now; these are written as stored before that rule, which must still show.
    const name = "Groceries \u202eevil";
    const storedBefore = async (agentId: string) => {
      await stack.core.db("agent_principals").where({ id: agentId }).update({ display_name: name });
      await stack.core.db.raw(`UPDATE budgets SET params = jsonb_set(params, '{displayName}', to_jsonb(?::text)) WHERE agent_principal_id = ?`, [
        name,
        agentId,
      ]);
    };
    const shown = `\u2068${name}\u2069`;
    const user = await createUser(stack);
    const owner = await token(user, user.vaultId, true);
    const made = await rpc("/mcp/treasury", owner, "agent.budget.create", budgetArgs(`b-${randomBytes(6).toString("hex")}`, { display_name: "Groceries" }));
    const agentId = made.json!.result.agent_principal_id as string;
    await storedBefore(agentId);
    await stack.admin.budgets.fundVault({ vaultId: made.json!.result.vault_id, amountCents: 100_000n });
    const payment = await rpc("/mcp/write", await token(user, made.json!.result.vault_id), "payments.initiate", payArgs(`p-${randomBytes(6).toString("hex")}`));
    const paymentId = payment.json!.result.payment_id as string;
    const draft = await rpc(
      "/mcp/treasury",
      await token(user),
      "agent.budget.create",
      budgetArgs(`b-${randomBytes(6).toString("hex")}`, { display_name: "Groceries" }),
    );
    await storedBefore(draft.json!.result.agent_principal_id as string);
    const jar = await signedIn(user.email);
    const pages = {
      dashboard: "/dashboard/agents",
      review: `/dashboard/approvals/payments/${paymentId}`,
      draft: `/dashboard/approvals/budgets/${draft.json!.result.agent_principal_id}`,
      agent: `/dashboard/agents/${agentId}`,
      money: "/dashboard/money",
    };
    for (const [what, path] of Object.entries(pages)) {
      const res = await jar.get(path);
      expect(res.status, what).to.equal(200);
      const text = await res.text();
      expect(text.split(name).length - 1, what).to.be.greaterThan(0);
      expect(text.split(shown).length, what).to.equal(text.split(name).length);
    }

    const client = await registerClient(stack, { client_name: "Groceries" });
    await stack.core.db("oauth_clients").where({ client_id: client.body.client_id }).update({ client_name: name });
    const q = new URLSearchParams({
      response_type: "code",
      client_id: client.body.client_id,
      redirect_uri: REDIRECT,
      code_challenge: pkce().challenge,
      code_challenge_method: "S256",
      scope: "accounts:read",
    });
    const consent = await (await jar.get(`/oauth2/authorize?${q}`)).text();
    expect(consent).to.include(`<title>Allow ${shown}?`);
    expect(consent).to.include(`<strong>${shown}</strong>`);
    // The vaults to choose from include the budgets, named by their agents.
    expect(consent.split(name).length).to.equal(consent.split(shown).length);
  });
});
