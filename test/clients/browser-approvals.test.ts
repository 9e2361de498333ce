import { expect } from "chai";
import { BROWSER_ARTIFACTS, launchPhoneBrowser, requireChromium, signInOnPage, stepUpOnPage } from "../support/browser.js";
import { join } from "node:path";
import { pendingPayment } from "../support/budgets.js";
import { startStack, type TestStack } from "../support/stack.js";
import { latestCode } from "../support/agent-oauth.js";

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
    const { rpc, user, agent, args, pending, paymentId } = await pendingPayment(stack, {
      key: "browser-approval",
      amountCents: 7_500,
      address: "0xabc0000000000000000000000000000000000001",
      budget: { amount_cap_cents_per_tx: 10_000 },
    });
    expect(pending.json!.result.kind).to.equal("pending_step_up");
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
      expect(text).to.include("A payment of $75.00 in USDC on base to 0xabc0000000000000000000000000000000000001, requested by \u2068Trip budget\u2069.");
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
