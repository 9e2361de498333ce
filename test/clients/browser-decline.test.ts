import { expect } from "chai";
import { join } from "node:path";
import { BROWSER_ARTIFACTS, launchPhoneBrowser, requireChromium, signInOnPage } from "../support/browser.js";
import { pendingPayment } from "../support/budgets.js";
import { startStack, type TestStack } from "../support/stack.js";
import { latestCode } from "../support/agent-oauth.js";

/**
 * Headless Chromium (Debian's package, phone viewport, JavaScript off): the owner declines
 * a pending payment from the dashboard (its notice shown once), and a malformed address shows a readable page.
 */
describe("browser: declining a pending payment; malformed addresses (headless Chromium)", function () {
  this.timeout(120_000);
  let stack: TestStack;

  before(async function () {
    requireChromium(this);
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });

  after(async () => {
    await stack?.close();
  });

  it("signs in, declines the payment from the dashboard; the agent's repeat is refused", async () => {
    const { rpc, user, agent, args, paymentId } = await pendingPayment(stack, {
      key: "browser-decline",
      amountCents: 9_000,
      address: "0xabc0000000000000000000000000000000000002",
    });

    const browser = await launchPhoneBrowser();
    try {
      const page = browser.context.pages()[0] ?? (await browser.context.newPage());
      const shot = (name: string) => page.screenshot({ path: join(BROWSER_ARTIFACTS, `${name}.png`), fullPage: true });

      await page.goto(`${stack.url}/dashboard/agents`);
      await signInOnPage(page, user.email, () => latestCode(stack, user.email));
      expect(new URL(page.url()).pathname).to.equal("/dashboard/agents");
      expect(await page.textContent("main")).to.include("A payment of $90.00 in USDC on base");
      await shot("decline-01-dashboard");
      await page.click(`form[action='/dashboard/approvals/payments/${paymentId}/decline'] button[type=submit]`);

      expect(new URL(page.url()).pathname).to.equal("/dashboard/agents");
      const after = await page.textContent("main");
      expect(after).to.include("The payment was declined. It will not be paid.");
      expect(after).to.include("Nothing is waiting for your approval");
      await shot("decline-02-declined");
      // The notice came from a one-time cookie: a reload, or a crafted link, shows none.
      await page.reload();
      expect(await page.textContent("main")).to.not.include("The payment was declined");
      await page.goto(`${stack.url}/dashboard/agents?done=killed`);
      expect(await page.textContent("main")).to.not.include("Every grant was revoked");

      // A tampered, undecodable address: a page a person can read, not JSON.
      const res = await page.goto(`${stack.url}/dashboard/agents/%E0%A4%A`);
      expect(res!.status()).to.equal(400);
      expect(await page.title()).to.equal("Something is wrong with this request · Vaultgate");
      expect(await page.textContent("main")).to.include("The address contains characters that are not allowed.");
      const query = await page.goto(`${stack.url}/oauth2/authorize?client_id=%ZZ`);
      expect(query!.status()).to.equal(400);
      expect(await page.title()).to.equal("Something is wrong with this request · Vaultgate");
      await shot("decline-03-bad-address");
    } finally {
      await browser.close();
    }

    const replay = await rpc("/mcp/write", agent, "payments.initiate", args);
    expect(replay.json!.error.data.reason_id).to.equal("access_denied");
  });
});
