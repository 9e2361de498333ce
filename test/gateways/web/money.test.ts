import { expect } from "chai";
import { randomBytes, randomUUID } from "node:crypto";
import { ALL_AGENT_SCOPES } from "../../support/budgets.js";
import { postRpc } from "../../support/mcp.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, signIn, stepUp, type Jar } from "../../support/agent-oauth.js";

const MONEY = "/dashboard/money";

/**
 * The owner's money view over real HTTP: balances, spend against caps, recent payments, pending
 * approvals, and per budget Fund and Close forms (CSRF, fresh step-up, per-render idempotency key).
 */
describe("web pages: the money view", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  let seq = 0;
  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: ++seq, method, params }, { authorization: `Bearer ${token}` });
  const token = async (user: { userId: string }, vaultId: string, stepUpGrant = false) =>
    (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId, scopes: ALL_AGENT_SCOPES, stepUp: stepUpGrant })).token!.accessToken;
  const pay = (agent: string, cents: number) => {
    stack.clock.advance(1_000); // distinct times: "newest first" is well defined
    return rpc("/mcp/write", agent, "payments.initiate", {
      counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
      amount_cents: cents,
      currency: "USD",
      idempotency_key: `p-${randomBytes(6).toString("hex")}`,
    });
  };
  const balances = async (...vaultIds: string[]) => {
    const rows = await stack.core.db("vaults").whereIn("id", vaultIds).select("id", "balance_cents");
    return vaultIds.map((id) => Number(rows.find((r: { id: string }) => r.id === id).balance_cents));
  };

  /**
   * A user with $2,000.00 in the root vault and an active budget "Trip <Lisbon> & co"
   * (caps $100 per payment, $200 a day, $500 in total; over $50 waits) holding $1,000.00,
   * after $6.00 and $5.00 paid, one payment of $70.00 waiting and one of $60.00 declined.
   */
  async function owner() {
    const user = await createUser(stack);
    await stack.admin.budgets.fundVault({ vaultId: user.vaultId, amountCents: 200_000n });
    const created = await rpc("/mcp/treasury", await token(user, user.vaultId, true), "agent.budget.create", {
      purpose: "trip",
      display_name: "Trip <Lisbon> & co",
      amount_cap_cents_per_tx: 10_000,
      amount_cap_cents_per_day: 20_000,
      amount_cap_cents_lifetime: 50_000,
      step_up_amount_cents: 5_000,
      chain_allowlist: ["base"],
      idempotency_key: `b-${randomBytes(6).toString("hex")}`,
    });
    expect(created.json!.result.status).to.equal("active");
    const budget = { vaultId: created.json!.result.vault_id as string, agentId: created.json!.result.agent_principal_id as string };
    await stack.admin.budgets.fundVault({ vaultId: budget.vaultId, amountCents: 100_000n });
    const agent = await token(user, budget.vaultId);
    await pay(agent, 600);
    await pay(agent, 500);
    const pending = (await pay(agent, 7_000)).json!.result.payment_id as string;
    const declined = (await pay(agent, 6_000)).json!.result.payment_id as string;
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email, MONEY);
    await stack.clients.budgets.declinePayment({ sessionToken: jar.cookies.get("vg_session")!, paymentId: declined });
    return { user, budget, agent, jar, pending, declined };
  }

  async function steppedUp(jar: Jar, email: string) {
    const res = await stepUp(stack, jar, email, `/stepup?return_to=${encodeURIComponent(MONEY)}`);
    expect(res.status).to.equal(303);
  }

  const page = async (jar: Jar, path = MONEY) => {
    const res = await jar.get(path);
    expect(res.status, path).to.equal(200);
    return res.text();
  };

  it("signed out, the money view goes through sign-in and back", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const res = await jar.get(MONEY);
    expect(res.status).to.equal(303);
    expect(res.headers.get("location")).to.equal(`/signin?return_to=${encodeURIComponent(MONEY)}`);
    const back = await signIn(stack, jar, user.email, MONEY);
    expect(back.headers.get("location")).to.equal(MONEY);
    const text = await page(jar);
    expect(text).to.include("<h1>Your money</h1>");
    expect(text).to.include("Your vault");
    expect(text).to.include("$0.00");
    expect(text).to.include("No payments yet.");
    expect(text).to.not.include(`action="${MONEY}/budgets/`);
  });

  it("shows each vault and budget: balance, spend against each cap as meters, recent payments, pending approvals, and the forms", async () => {
    const { user, budget, jar, pending } = await owner();
    const text = await page(jar);
    // The root vault, then the budget (its name escaped).
    const root = text.indexOf(`id="v-${user.vaultId}"`);
    const child = text.indexOf(`id="v-${budget.vaultId}"`);
    expect(root).to.be.greaterThan(-1);
    expect(child).to.be.greaterThan(root);
    expect(text).to.include("Trip &lt;Lisbon&gt; &amp; co");
    expect(text).to.not.include("Trip <Lisbon>");
    expect(text).to.include("$2,989.00"); // everything the owner holds: $2,000.00 in the vault, $989.00 in the budget
    expect(text.slice(root, child)).to.include("$2,000.00");
    const card = text.slice(child, text.indexOf("</section>", child));
    expect(card).to.include("$989.00"); // 1,000.00 - 6.00 - 5.00
    expect(card).to.include("Active");
    expect(card).to.include("Spent today (UTC)");
    expect(card).to.include("$11.00 of $200.00");
    expect(card).to.include("$11.00 of $500.00");
    expect(card).to.match(
      /<meter min="0" max="20000" low="10000" high="18000" optimum="0" value="1100" aria-label="Spent today \(UTC\): \$11\.00 of \$200\.00">/,
    );
    expect(card).to.match(/<meter min="0" max="50000" [^>]*value="1100"/);
    expect(card).to.include("At most $100.00 per payment · over $50.00 waits for your approval · only on base");
    // Recent payments, newest first, with their status.
    const statuses = [...card.matchAll(/<tr class="payment payment-([a-z_]+)">/g)].map((m) => m[1]);
    expect(statuses).to.deep.equal(["declined", "pending_step_up", "completed", "completed"]);
    expect(card).to.include(`<a href="/dashboard/approvals/payments/${pending}">Waiting for your approval</a>`);
    expect(card).to.include("$60.00");
    // Pending approvals (the existing list) below the vaults.
    expect(text.indexOf("<h2>Pending approvals</h2>")).to.be.greaterThan(child);
    expect(text.slice(text.indexOf("<h2>Pending approvals</h2>"))).to.include(`href="/dashboard/approvals/payments/${pending}"`);
    // The forms: CSRF, a per-render idempotency key, the page to come back to.
    const fund = formFields(text, `${MONEY}/budgets/${budget.vaultId}/fund`);
    expect(Object.keys(fund).sort()).to.deep.equal(["csrf", "idempotency_key", "return_to"]);
    expect(fund.return_to).to.equal(MONEY);
    expect(fund.idempotency_key).to.match(/^[A-Za-z0-9_-]{24}$/);
    const again = formFields(await page(jar), `${MONEY}/budgets/${budget.vaultId}/fund`);
    expect(again.idempotency_key).to.not.equal(fund.idempotency_key);
    expect(Object.keys(formFields(text, `${MONEY}/budgets/${budget.vaultId}/close`)).sort()).to.deep.equal(["csrf", "return_to"]);
    expect(card).to.include('name="keep_funds" value="yes"');
    expect(text).to.not.include(`action="${MONEY}/budgets/${user.vaultId}/`); // a root vault is neither funded nor closed here
    // Linked from the agents page and from every page's header.
    const agents = await page(jar, "/dashboard/agents");
    expect(agents).to.include(`<a href="${MONEY}">`);
    expect(text).to.not.include("<script");
  });

  it("a budget's agent page shows the budget's numbers and forms that return to it; unknown agents are not found", async () => {
    const { budget, jar } = await owner();
    const here = `/dashboard/agents/${budget.agentId}`;
    const text = await page(jar, here);
    expect(text).to.include("<h1>\u2068Trip &lt;Lisbon&gt; &amp; co\u2069</h1>");
    expect(text).to.include("$989.00");
    expect(text).to.include("$11.00 of $200.00");
    expect(text).to.include("<h2>Pending approvals</h2>");
    expect(formFields(text, `${MONEY}/budgets/${budget.vaultId}/fund`).return_to).to.equal(here);
    expect(formFields(text, `${MONEY}/budgets/${budget.vaultId}/close`).return_to).to.equal(here);
    const unknown = await jar.get(`/dashboard/agents/${randomUUID()}`);
    expect(unknown.status).to.equal(404);
    const unknownText = await unknown.text();
    expect(unknownText).to.include("There is no such agent.");
    // Signed in: the way on is their agents.
    expect(unknownText).to.include('<a href="/dashboard/agents">Go to your agents</a>');
    // Another user's budget agent is not theirs to see.
    const stranger = createJar(stack.url);
    await signIn(stack, stranger, (await createUser(stack)).email, MONEY);
    expect((await stranger.get(here)).status).to.equal(404);
    expect(await page(stranger)).to.not.include(budget.vaultId);
  });

  it("without a fresh step-up, Fund goes through the step-up page and back with the amount kept; nothing moves", async () => {
    const { user, budget, jar } = await owner();
    const before = await balances(user.vaultId, budget.vaultId);
    const action = `${MONEY}/budgets/${budget.vaultId}/fund`;
    const res = await jar.post(action, { ...formFields(await page(jar), action), amount: "12.50" });
    expect(res.status).to.equal(303);
    const back = `${MONEY}?done=stepped-up&fund=${budget.vaultId}&amount=12.50#v-${budget.vaultId}`;
    expect(res.headers.get("location")).to.equal(`/stepup?return_to=${encodeURIComponent(back)}`);
    const stepped = await stepUp(stack, jar, user.email, res.headers.get("location")!);
    expect(stepped.headers.get("location")).to.equal(back);
    const text = await page(jar, back.split("#")[0]);
    expect(text).to.include("You confirmed it&#39;s you. Send the form again to move the money.");
    expect(text).to.include(`id="amount-${budget.vaultId}" type="text" name="amount" inputmode="decimal" autocomplete="off" placeholder="0.00" value="12.50"`);
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal(before);
    // A step-up older than 10 minutes counts for nothing: Close (from the agent's page) goes round again.
    stack.clock.advance(601_000);
    const close = `${MONEY}/budgets/${budget.vaultId}/close`;
    const here = `/dashboard/agents/${budget.agentId}`;
    const stale = await jar.post(close, formFields(await page(jar, here), close));
    expect(stale.headers.get("location")).to.equal(`/stepup?return_to=${encodeURIComponent(`${here}?done=stepped-up#v-${budget.vaultId}`)}`);
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal(before);
    expect(await page(jar, here)).to.include("Active");
  });

  it("without a fresh step-up, Close with keep funds comes back from the step-up page still keeping them; the next Close keeps the money", async () => {
    const { user, budget, jar } = await owner();
    const before = await balances(user.vaultId, budget.vaultId);
    const close = `${MONEY}/budgets/${budget.vaultId}/close`;
    const here = `/dashboard/agents/${budget.agentId}`;
    const res = await jar.post(close, { ...formFields(await page(jar, here), close), keep_funds: "yes" });
    const back = `${here}?done=stepped-up&keep_funds=${budget.vaultId}#v-${budget.vaultId}`;
    expect(res.headers.get("location")).to.equal(`/stepup?return_to=${encodeURIComponent(back)}`);
    expect((await stepUp(stack, jar, user.email, res.headers.get("location")!)).headers.get("location")).to.equal(back);
    const text = await page(jar, back.split("#")[0]);
    const card = text.slice(text.indexOf(`action="${close}"`));
    expect(card.slice(0, card.indexOf("</form>"))).to.include('name="keep_funds" value="yes" checked>');
    // Only that budget's form comes back checked, and never from an id that is not one.
    expect(text.split('value="yes" checked').length).to.equal(2);
    expect(await page(jar, `${here}?keep_funds=x`)).to.not.include('value="yes" checked');
    // The browser sends the checked box with the form again: the budget closes and keeps its money.
    const done = await jar.post(close, { ...formFields(text, close), keep_funds: "yes" });
    expect(done.headers.get("location")).to.equal(`${here}#v-${budget.vaultId}`);
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal(before);
    expect(await page(jar, here)).to.include("its remaining funds stay in it");
  });

  it("an agent page's address in upper case is the same page: the forms return to it, in lower case", async () => {
    const { budget, jar } = await owner();
    const here = `/dashboard/agents/${budget.agentId}`;
    const upper = `/dashboard/agents/${budget.agentId.toUpperCase()}`;
    const action = `${MONEY}/budgets/${budget.vaultId}/fund`;
    const fields = { ...formFields(await page(jar, upper), action), return_to: upper };
    const detour = await jar.post(action, { ...fields, amount: "12.50" });
    const back = `${here}?done=stepped-up&fund=${budget.vaultId}&amount=12.50#v-${budget.vaultId}`;
    expect(detour.headers.get("location")).to.equal(`/stepup?return_to=${encodeURIComponent(back)}`);
    const refused = await jar.post(action, { ...fields, amount: "abc" });
    expect(refused.status).to.equal(400);
    expect(await refused.text()).to.include("<h1>\u2068Trip &lt;Lisbon&gt; &amp; co\u2069</h1>");
  });

  it("refuses a bad amount, a missing key, a forged CSRF token and a malformed id with a readable page", async () => {
    const { user, budget, jar } = await owner();
    const before = await balances(user.vaultId, budget.vaultId);
    const action = `${MONEY}/budgets/${budget.vaultId}/fund`;
    for (const amount of ["", "abc", "-5", "0", "0.00", "1.234", "1e3", "9".repeat(14)]) {
      const res = await jar.post(action, { ...formFields(await page(jar), action), amount });
      expect(res.status, amount).to.equal(400);
      const text = await res.text();
      expect(text, amount).to.match(/Enter an amount (such as 25|greater than zero)/);
      // The money view again, with the forms to correct it.
      expect(text, amount).to.include(`action="${action}"`);
      expect(text).to.not.match(/at \S+\.(ts|js):\d+|Error:/);
    }
    const fields = formFields(await page(jar), action);
    const noKey = await jar.post(action, { csrf: fields.csrf!, return_to: MONEY, amount: "5" });
    expect(noKey.status).to.equal(400);
    expect(await noKey.text()).to.include("This form has expired");
    const forged = await jar.post(action, { ...fields, csrf: "forged", amount: "5" });
    expect(forged.status).to.equal(403);
    for (const bad of [`${MONEY}/budgets/not-a-uuid/fund`, `${MONEY}/budgets/${"x".repeat(36)}/close`]) {
      const res = await jar.post(bad, { ...fields, amount: "5" });
      expect(res.status, bad).to.equal(404);
      expect(await res.text()).to.include("There is no such budget.");
    }
    // A return_to elsewhere is ignored: answers stay on our own pages.
    const offsite = await jar.post(action, { ...fields, amount: "5", return_to: "https://evil.example/" });
    expect(offsite.headers.get("location")).to.match(/^\/stepup\?return_to=%2Fdashboard%2Fmoney/);
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal(before);
    const anonymous = await createJar(stack.url).post(action, { amount: "5" });
    expect(anonymous.status).to.equal(403);
  });

  it("a return_to naming no agent of this person (missing, or another's) is ignored: the refusal shows on the money view", async () => {
    const { user, budget, jar } = await owner();
    const stranger = await owner();
    const action = `${MONEY}/budgets/${budget.vaultId}/fund`;
    for (const elsewhere of [`/dashboard/agents/${randomUUID()}`, `/dashboard/agents/${stranger.budget.agentId}`]) {
      const fields = { ...formFields(await page(jar), action), return_to: elsewhere };
      const bad = await jar.post(action, { ...fields, amount: "abc" });
      expect(bad.status, elsewhere).to.equal(400);
      const text = await bad.text();
      expect(text).to.include("<h1>Your money</h1>");
      expect(text).to.include("That amount cannot be used");
      expect(text).to.not.include("There is no such agent.");
      expect(text).to.not.include(stranger.budget.vaultId);
      const detour = await jar.post(action, { ...fields, amount: "1" });
      expect(detour.headers.get("location")).to.match(/^\/stepup\?return_to=%2Fdashboard%2Fmoney%3F/);
    }
    await steppedUp(jar, user.email);
    const tooMuch = await jar.post(action, { ...formFields(await page(jar), action), amount: "100000", return_to: `/dashboard/agents/${randomUUID()}` });
    expect(tooMuch.status).to.equal(409);
    expect(await tooMuch.text()).to.include("Not enough money");
    const funded = await jar.post(action, { ...formFields(await page(jar), action), amount: "1", return_to: `/dashboard/agents/${randomUUID()}` });
    expect(funded.headers.get("location")).to.equal(`${MONEY}#v-${budget.vaultId}`);
    expect(jar.cookies.get("vg_notice")).to.match(/^funded\.[\w-]{43}$/);
  });

  // FundBudget and CloseBudget (core) as the proto describes them: the owner's session with
  // a fresh step-up; FundBudget idempotent on its key, CloseBudget sweeping unless keep_funds.

  it("Fund moves the amount from the parent vault once, even when the form is sent twice", async () => {
    const { user, budget, jar } = await owner();
    await steppedUp(jar, user.email);
    const action = `${MONEY}/budgets/${budget.vaultId}/fund`;
    const fields = { ...formFields(await page(jar), action), amount: "250.25" };
    const first = await jar.post(action, fields);
    expect(first.status, (await first.clone().text()).slice(-300)).to.equal(303);
    expect(first.headers.get("location")).to.equal(`${MONEY}#v-${budget.vaultId}`);
    expect(jar.cookies.get("vg_notice")).to.match(/^funded\.[\w-]{43}$/);
    const twice = await jar.post(action, fields);
    expect(twice.headers.get("location")).to.equal(`${MONEY}#v-${budget.vaultId}`);
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([200_000 - 25_025, 98_900 + 25_025]);
    const text = await page(jar, MONEY);
    expect(text).to.include("the money moved once, not twice");
    expect(text).to.include("$1,239.25");
    // The same form with another amount is not a second transfer.
    const conflict = await jar.post(action, { ...fields, amount: "1" });
    expect(conflict.status).to.equal(409);
    expect(await conflict.text()).to.include("That form was already used");
    // More than the parent vault holds: core's refusal, in words, on the page.
    const tooMuch = await jar.post(action, { ...formFields(await page(jar), action), amount: "100000" });
    expect(tooMuch.status).to.equal(409);
    expect(await tooMuch.text()).to.include("Not enough money");
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([200_000 - 25_025, 98_900 + 25_025]);
  });

  it("Close sweeps the budget back to its parent, revokes its agent and shows it closed; Close with keep funds keeps them", async () => {
    const { user, budget, agent, jar } = await owner();
    await steppedUp(jar, user.email);
    const close = `${MONEY}/budgets/${budget.vaultId}/close`;
    const form = formFields(await page(jar), close);
    const res = await jar.post(close, form);
    expect(res.status, (await res.clone().text()).slice(-300)).to.equal(303);
    expect(res.headers.get("location")).to.equal(`${MONEY}#v-${budget.vaultId}`);
    expect(await balances(user.vaultId, budget.vaultId)).to.deep.equal([200_000 + 98_900, 0]);
    const text = await page(jar, MONEY);
    expect(text).to.include("The budget was closed.");
    const card = text.slice(text.indexOf(`id="v-${budget.vaultId}"`));
    expect(card.slice(0, card.indexOf("</section>"))).to.include("Closed");
    expect(text).to.not.include(`action="${MONEY}/budgets/${budget.vaultId}/`);
    expect((await pay(agent, 100)).json!.error).to.not.equal(undefined);
    // The same (stale) form again: nothing more happens.
    const again = await jar.post(close, form);
    expect(again.headers.get("location")).to.equal(`${MONEY}#v-${budget.vaultId}`);
    expect(jar.cookies.get("vg_notice")).to.match(/^already-closed\.[\w-]{43}$/);

    const other = await owner();
    await steppedUp(other.jar, other.user.email);
    const kept = `${MONEY}/budgets/${other.budget.vaultId}/close`;
    const here = `/dashboard/agents/${other.budget.agentId}`;
    const k = await other.jar.post(kept, { ...formFields(await page(other.jar, here), kept), keep_funds: "yes" });
    expect(k.headers.get("location")).to.equal(`${here}#v-${other.budget.vaultId}`);
    expect(await page(other.jar, here)).to.include("its remaining funds stay in it");
    expect(await balances(other.user.vaultId, other.budget.vaultId)).to.deep.equal([200_000, 98_900]);
  });

  it("another user's stepped-up session cannot fund or close the owner's budget", async () => {
    const { user, budget, jar } = await owner();
    const stranger = await createUser(stack);
    await stack.admin.budgets.fundVault({ vaultId: stranger.vaultId, amountCents: 100_000n });
    const sjar = createJar(stack.url);
    await signIn(stack, sjar, stranger.email, MONEY);
    await steppedUp(sjar, stranger.email);
    const strangerPage = await page(sjar);
    const fields = { csrf: formFields(strangerPage, "/signout").csrf as string, return_to: MONEY, idempotency_key: randomBytes(18).toString("base64url") };
    const fund = await sjar.post(`${MONEY}/budgets/${budget.vaultId}/fund`, { ...fields, amount: "10" });
    expect(fund.status).to.be.oneOf([403, 404]);
    const close = await sjar.post(`${MONEY}/budgets/${budget.vaultId}/close`, fields);
    expect(close.status).to.be.oneOf([403, 404]);
    expect(await balances(user.vaultId, budget.vaultId, stranger.vaultId)).to.deep.equal([200_000, 98_900, 100_000]);
    expect(await page(jar)).to.include("Active");
  });
});
