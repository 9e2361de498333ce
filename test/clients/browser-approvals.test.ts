import { expect } from "chai";
import { BROWSER_ARTIFACTS, launchPhoneBrowser, requireChromium, signInOnPage, stepUpOnPage } from "../support/browser.js";
import { join } from "node:path";
import { ALL_AGENT_SCOPES } from "../support/budgets.js";
import { postRpc } from "../support/mcp.js";
import { startStack, type TestStack } from "../support/stack.js";
import { createUser, latestCode } from "../support/agent-oauth.js";


/**
 * Headless Chromium (as in browser.test.ts: Debian's package, playwright-core, phone
 * viewport, JavaScript disabled) follows a pending payment's step_up_url: sign-in,
 * review, step-up, approve; the agent's identical payments.initiate then completes.
 */
describe("browser: approving a pending payment through its step_up_url (headless Chromium)", function () {
  this.timeout(120_000);
  let stack: TestStack;

  before(async function () {
    requireChromium(this);
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });

  after(async () => {
    await stack?.close();
  });

  it("signs in from the step_up_url, steps up and approves; the agent's call completes", async () => {
    const rpc = (path: string, token: string, method: string, params: unknown) =>
      postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
    const user = await createUser(stack);
    const owner = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true })).token!.accessToken;
    const budget = await rpc("/mcp/treasury", owner, "agent.budget.create", {
      purpose: "trip",
      display_name: "Trip budget",
      amount_cap_cents_per_tx: 10_000,
      step_up_amount_cents: 5_000,
      chain_allowlist: ["base"],
      idempotency_key: "browser-approval-budget",
    });
    const childVault = budget.json!.result.vault_id as string;
    await stack.admin.budgets.fundVault({ vaultId: childVault, amountCents: 50_000n });
    const agent = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: childVault, scopes: ALL_AGENT_SCOPES })).token!.accessToken;
    const args = {
      counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
      amount_cents: 7_500,
      currency: "USD",
      idempotency_key: "browser-approval-payment",
    };
    const pending = await rpc("/mcp/write", agent, "payments.initiate", args);
    expect(pending.json!.result.kind).to.equal("pending_step_up");
    const paymentId = pending.json!.result.payment_id as string;
    const review = `/dashboard/approvals/payments/${paymentId}`;

    const browser = await launchPhoneBrowser();
    const { context } = browser;
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      const shot = (name: string) => page.screenshot({ path: join(BROWSER_ARTIFACTS, `${name}.png`), fullPage: true });

      await page.goto(pending.json!.result.step_up_url as string);
      const outboxCode = () => latestCode(stack, user.email);
      await signInOnPage(page, user.email, outboxCode, { form: "approval-01-signin" });

      expect(new URL(page.url()).pathname).to.equal(review);
      const text = await page.textContent("main");
      expect(text).to.include("A payment of $75.00 in USDC on base to 0xabc0000000000000000000000000000000000001, requested by Operator-issued grants.");
      expect(text).to.include("0xabc0000000000000000000000000000000000001");
      await shot("approval-02-review");
      await page.click(`form[action='${review}/approve'] button[type=submit]`);

      // No fresh step-up yet: the existing step-up page, then back to the review.
      await stepUpOnPage(page, outboxCode, { form: "approval-03-stepup" });
      expect(new URL(page.url()).pathname).to.equal(review);
      expect(await page.textContent("main")).to.include("You confirmed it's you a moment ago");
      await shot("approval-04-review-stepped-up");
      await page.click(`form[action='${review}/approve'] button[type=submit]`);

      expect(new URL(page.url()).pathname).to.equal("/dashboard/agents");
      const dash = await page.textContent("main");
      expect(dash).to.include("The payment was approved");
      expect(dash).to.include("Nothing is waiting for your approval");
      await shot("approval-05-approved");
    } finally {
      await browser.close();
    }

    const done = await rpc("/mcp/write", agent, "payments.initiate", args);
    expect(done.json!.result).to.deep.equal({ kind: "accepted", payment_id: paymentId, status: "completed" });
  });
});
