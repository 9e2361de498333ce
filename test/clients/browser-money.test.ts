import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { BROWSER_ARTIFACTS, launchPhoneBrowser, requireChromium, signInOnPage, stepUpOnPage } from "../support/browser.js";
import { ALL_AGENT_SCOPES } from "../support/budgets.js";
import { postRpc } from "../support/mcp.js";
import { startStack, type TestStack } from "../support/stack.js";
import { createUser, latestCode } from "../support/agent-oauth.js";

/**
 * Headless Chromium (JavaScript off, as in browser.test.ts) reads the money view, funds one
 * budget and closes another through the forms; screenshots go to test-artifacts/browser/.
 */
describe("browser: the money view, funding and closing budgets (headless Chromium)", function () {
  this.timeout(120_000);
  let stack: TestStack;

  before(async function () {
    requireChromium(this);
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });

  after(async () => {
    await stack?.close();
  });

  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
  const token = async (user: { userId: string }, vaultId: string, stepUp = false) =>
    (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId, scopes: ALL_AGENT_SCOPES, stepUp })).token!.accessToken;

  async function budget(user: { userId: string; vaultId: string }, name: string, caps: Record<string, number>, fundCents: bigint) {
    stack.clock.advance(1_000);
    const res = await rpc("/mcp/treasury", await token(user, user.vaultId, true), "agent.budget.create", {
      purpose: "trip",
      display_name: name,
      chain_allowlist: ["base"],
      idempotency_key: `b-${randomBytes(6).toString("hex")}`,
      ...caps,
    });
    const vaultId = res.json!.result.vault_id as string;
    await stack.admin.budgets.fundVault({ vaultId, amountCents: fundCents });
    return { vaultId, agent: await token(user, vaultId) };
  }

  const pay = (agent: string, cents: number) => {
    stack.clock.advance(1_000);
    return rpc("/mcp/write", agent, "payments.initiate", {
      counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
      amount_cents: cents,
      currency: "USD",
      idempotency_key: `p-${randomBytes(6).toString("hex")}`,
    });
  };

  it("signs in, reads balances and bars, funds a budget after a step-up and closes another", async () => {
    const user = await createUser(stack);
    await stack.admin.budgets.fundVault({ vaultId: user.vaultId, amountCents: 250_000n });
    const groceries = await budget(
      user,
      "Groceries",
      { amount_cap_cents_per_day: 20_000, amount_cap_cents_lifetime: 100_000, step_up_amount_cents: 5_000 },
      30_000n,
    );
    const trip = await budget(user, "Conference trip", { amount_cap_cents_per_tx: 50_000 }, 80_000n);
    for (const cents of [4_500, 3_000, 8_000]) await pay(groceries.agent, cents); // the last waits for approval
    await pay(trip.agent, 12_000);

    const browser = await launchPhoneBrowser();
    const { context } = browser;
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      const shot = (name: string) => page.screenshot({ path: join(BROWSER_ARTIFACTS, `${name}.png`), fullPage: true });
      const card = (vaultId: string) => page.locator(`#v-${vaultId}`);
      const outboxCode = () => latestCode(stack, user.email);

      await page.goto(`${stack.url}/dashboard/money`);
      await signInOnPage(page, user.email, outboxCode);
      expect(new URL(page.url()).pathname).to.equal("/dashboard/money");

      // Before: every vault with its balance; spend as meters with the numbers in words.
      const g = card(groceries.vaultId);
      expect(await g.locator(".balance").textContent()).to.include("$225.00");
      expect(await g.textContent()).to.include("$75.00 of $200.00");
      expect(await g.textContent()).to.include("$75.00 of $1,000.00");
      expect(await g.locator("meter").count()).to.equal(2);
      expect(await g.locator("meter").first().getAttribute("value")).to.equal("7500");
      expect(await g.locator("meter").first().isVisible()).to.equal(true);
      expect(await g.textContent()).to.include("Waiting for your approval");
      const t = card(trip.vaultId);
      expect(await t.locator(".balance").textContent()).to.include("$680.00");
      expect(await t.textContent()).to.include("no daily limit");
      expect(await card(user.vaultId).locator(".balance").textContent()).to.include("$2,500.00");
      expect(await page.textContent("main")).to.include("Pending approvals");
      await shot("money-01-before");

      // Fund: no fresh step-up yet, so the step-up page first, then back with the amount kept.
      await g.locator("input[name=amount]").fill("40.50");
      await g.locator("form[action$='/fund'] button[type=submit]").click();
      await stepUpOnPage(page, outboxCode);
      expect(new URL(page.url()).pathname).to.equal("/dashboard/money");
      expect(await page.textContent("main")).to.include("You confirmed it's you");
      expect(await card(groceries.vaultId).locator("input[name=amount]").inputValue()).to.equal("40.50");
      await shot("money-02-stepped-up");
      await card(groceries.vaultId).locator("form[action$='/fund'] button[type=submit]").click();
      expect(await page.textContent("main")).to.include("The budget was funded.");
      expect(await card(groceries.vaultId).locator(".balance").textContent()).to.include("$265.50");
      expect(await card(user.vaultId).locator(".balance").textContent()).to.include("$2,459.50");

      // Close the trip budget: what remains goes back to the vault.
      await card(trip.vaultId).locator("form[action$='/close'] button[type=submit]").click();
      const main = await page.textContent("main");
      expect(main).to.include("The budget was closed.");
      expect(await card(trip.vaultId).textContent()).to.include("Closed");
      expect(await card(trip.vaultId).locator("form").count()).to.equal(0);
      expect(await card(user.vaultId).locator(".balance").textContent()).to.include("$3,139.50");
      await shot("money-03-after");
    } finally {
      await browser.close();
    }
    // The closed budget's agent can no longer pay.
    expect((await pay(trip.agent, 100)).json!.error).to.not.equal(undefined);
  });
});
