import { expect } from "chai";
import { requireChromium, signInOnPage, stepUpOnPage } from "../support/browser.js";
import { pendingPayment } from "../support/budgets.js";
import { freePort, startStack, type TestStack } from "../support/stack.js";
import { latestCode } from "../support/agent-oauth.js";
import { launchWebAuthnBrowser } from "../support/webauthn.js";
import { STEP_UP_WINDOW_SECONDS } from "../../core/identity/sessions.js";

/**
 * Chromium with a virtual authenticator adds a passkey and steps up a payment with it; an answer
 * to another challenge is refused. Served on localhost because WebAuthn takes no IP as RP ID.
 */
describe("browser: passkeys on the dashboard and as step-up (headless Chromium, virtual authenticator)", function () {
  this.timeout(120_000);
  let stack: TestStack;
  let app: string;

  before(async function () {
    requireChromium(this);
    const port = await freePort();
    app = `http://localhost:${port}`;
    stack = await startStack({ gateway: true, publicUrls: true, port, appUrl: app, signinMethods: ["email", "passkey"], scrypt: { N: 1024, r: 8, p: 1 } });
  });

  after(async () => {
    await stack?.close();
  });

  it("registers a passkey, approves a payment over the step-up amount with it, and refuses an answer to another challenge", async () => {
    const { rpc, user, agent, args, pending, paymentId } = await pendingPayment(stack, {
      key: "browser-passkey",
      amountCents: 7_500,
      address: "0xabc0000000000000000000000000000000000002",
      budget: { amount_cap_cents_per_tx: 10_000 },
    });
    expect(pending.json!.result.kind).to.equal("pending_step_up");
    const review = `/dashboard/approvals/payments/${paymentId}`;
    const code = () => latestCode(stack, user.email);

    const browser = await launchWebAuthnBrowser();
    try {
      const { page } = browser;
      await page.goto(`${app}/dashboard/passkeys`);
      await signInOnPage(page, user.email, code);
      expect(new URL(page.url()).pathname).to.equal("/dashboard/passkeys");
      expect(await page.textContent("main")).to.include("You have no passkeys yet");

      // Adding one needs a fresh step-up first (here by e-mail code).
      await page.click("a[href='/dashboard/passkeys/add']");
      await stepUpOnPage(page, code);
      expect(new URL(page.url()).pathname).to.equal("/dashboard/passkeys/add");
      await page.fill("#name", "test laptop");
      await page.click("form[data-passkey] button[type=submit]");
      await page.waitForURL(/\/dashboard\/passkeys$/);
      const list = await page.textContent("main");
      expect(list).to.include("Your passkey was added.");
      expect(list).to.include("test laptop");

      // The code step-up goes stale; the passkey is now the fresh confirmation.
      stack.clock.advance((STEP_UP_WINDOW_SECONDS + 1) * 1000);
      await page.goto(`${app}${review}`);
      await page.click(`form[action='${review}/approve'] button[type=submit]`);
      expect(new URL(page.url()).pathname).to.equal("/stepup");
      await page.click("a[href^='/stepup/passkey']");
      await page.click("form[data-passkey] button[type=submit]");
      await page.waitForURL((u) => u.pathname === review);
      expect(await page.textContent("main")).to.include("You confirmed it's you a moment ago");
      await page.click(`form[action='${review}/approve'] button[type=submit]`);
      expect(new URL(page.url()).pathname).to.equal("/dashboard/agents");
      expect(await page.textContent("main")).to.include("The payment was approved");

      // A response for another challenge: the page holds one flow's options, the cookie another's.
      await page.goto(`${app}/stepup/passkey?return_to=%2Fdashboard%2Fagents`);
      const stale = await page.getAttribute("form[data-passkey]", "data-options");
      await page.goto(`${app}/stepup/passkey?return_to=%2Fdashboard%2Fagents`);
      await page.$eval("form[data-passkey]", (form, o) => form.setAttribute("data-options", o), stale!);
      const [answer] = await Promise.all([page.waitForResponse((r) => r.request().method() === "POST"), page.click("form[data-passkey] button[type=submit]")]);
      expect(answer.status()).to.equal(403);
      await page.waitForLoadState();
      expect(await page.textContent("main")).to.include("your passkey did not confirm it is you");
    } finally {
      await browser.close();
    }

    const done = await rpc("/mcp/write", agent, "payments.initiate", args);
    expect(done.json!.result).to.deep.equal({ kind: "accepted", payment_id: paymentId, status: "completed" });
  });
});
