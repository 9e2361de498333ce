import { expect } from "chai";
import type { Page } from "playwright-core";
import { launchPhoneBrowser, requireChromium } from "../support/browser.js";
import { pendingPayment } from "../support/budgets.js";
import { startStack, type TestStack } from "../support/stack.js";
import { startIdp, type TestIdp } from "../support/oidc-idp.js";
import { freePort } from "../support/ports.js";

/**
 * Chromium (JavaScript off) approves a payment over the step-up amount on a deployment that
 * offers only its provider (node-oidc-provider in its own process, requiring acr "mfa"):
 * sign-in and step-up both happen on the provider's own login page.
 */
describe("browser: approving a payment with a step-up at the organisation's provider", function () {
  this.timeout(120_000);
  let stack: TestStack;
  let idp: TestIdp;
  before(async function () {
    this.timeout(180_000);
    requireChromium(this);
    const port = await freePort();
    stack = await startStack({
      gateway: true,
      publicUrls: true,
      scrypt: { N: 1024, r: 8, p: 1 },
      oidc: { issuer: `http://127.0.0.1:${port}`, clientId: "vaultgate", clientSecret: "vaultgate-idp-secret", stepUpAcr: ["mfa"] },
      signinMethods: ["oidc"],
    });
    idp = await startIdp({ redirectUris: [`${stack.url}/signin/oidc/callback`], port });
  });
  after(async () => {
    await stack?.close();
    await idp?.stop();
  });

  async function loginAtProvider(page: Page, sub: string) {
    expect(await page.title()).to.equal("Example Corp sign-in");
    await page.selectOption("#account", sub);
    await page.fill("#password", "correct horse");
    await page.click("button[type=submit]");
  }

  async function reviewPending(key: string) {
    const p = await pendingPayment(stack, {
      key,
      amountCents: 7_500,
      address: "0xabc0000000000000000000000000000000000002",
      budget: { amount_cap_cents_per_tx: 10_000 },
    });
    expect(p.pending.json!.result.kind).to.equal("pending_step_up");
    const sub = `chrome-su-${p.user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: p.user.email, email_verified: true });
    return { ...p, sub, review: `/dashboard/approvals/payments/${p.paymentId}` };
  }

  it("signs in at the provider, steps up there with acr mfa and approves; the agent's call completes", async () => {
    const { rpc, agent, args, pending, paymentId, sub, review } = await reviewPending("browser-provider-approval");
    const browser = await launchPhoneBrowser();
    try {
      const page = browser.context.pages()[0] ?? (await browser.context.newPage());
      await page.goto(pending.json!.result.step_up_url as string);
      // Only the provider is offered: no e-mail form on the sign-in page.
      expect(await page.locator("input[name=email]").count()).to.equal(0);
      await idp.setLogin({ acr: "pwd", amr: ["pwd"] });
      await page.click("text=Sign in with your organisation");
      await loginAtProvider(page, sub);
      expect(new URL(page.url()).pathname).to.equal(review);
      // Only the provider confirms it is them here: the page promises no e-mailed code.
      expect(await page.textContent("main")).to.match(/confirm it's you/);
      expect(await page.textContent("main")).not.to.match(/e-mail/);

      await page.click(`form[action='${review}/approve'] button[type=submit]`);
      expect(new URL(page.url()).pathname).to.equal("/stepup");
      await idp.setLogin({ acr: "mfa", amr: ["pwd", "otp"] });
      await page.click("text=Confirm at your organisation");
      await loginAtProvider(page, sub);
      expect(new URL(page.url()).pathname).to.equal(review);
      expect(await page.textContent("main")).to.include("You confirmed it's you a moment ago");
      await page.click(`form[action='${review}/approve'] button[type=submit]`);
      expect(new URL(page.url()).pathname).to.equal("/dashboard/agents");
      expect(await page.textContent("main")).to.include("The payment was approved");
    } finally {
      await browser.close();
    }
    const done = await rpc("/mcp/write", agent, "payments.initiate", args);
    expect(done.json!.result).to.deep.equal({ kind: "accepted", payment_id: paymentId, status: "completed" });
  });

  it("a step-up with too weak an acr is refused with a page, and the payment stays pending", async () => {
    const { pending, sub, review } = await reviewPending("browser-provider-weak");
    const browser = await launchPhoneBrowser();
    try {
      const page = browser.context.pages()[0] ?? (await browser.context.newPage());
      await page.goto(pending.json!.result.step_up_url as string);
      await idp.setLogin({ acr: "pwd", amr: ["pwd"] });
      await page.click("text=Sign in with your organisation");
      await loginAtProvider(page, sub);
      await page.click(`form[action='${review}/approve'] button[type=submit]`);
      await page.click("text=Confirm at your organisation");
      await loginAtProvider(page, sub);
      expect(await page.textContent("main")).to.match(/try the confirmation again/);
      await page.goto(`${stack.url}${review}`);
      expect(await page.textContent("main")).not.to.include("You confirmed it's you a moment ago");
      await page.click(`form[action='${review}/approve'] button[type=submit]`);
      expect(new URL(page.url()).pathname).to.equal("/stepup");
    } finally {
      await browser.close();
    }
  });
});
