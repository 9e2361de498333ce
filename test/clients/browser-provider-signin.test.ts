import { expect } from "chai";
import { launchPhoneBrowser, requireChromium, signInOnPage } from "../support/browser.js";
import { startStack, type TestStack } from "../support/stack.js";
import { createUser } from "../support/agent-oauth.js";
import { startIdp, type TestIdp } from "../support/oidc-idp.js";
import { startSmtpServer, codeIn, type TestSmtpServer } from "../support/smtp.js";
import { freePort } from "../support/ports.js";

/**
 * Chromium (JavaScript off) signs in at a company's provider (node-oidc-provider in its
 * own process) and with a code read from the test's SMTP server.
 */
describe("browser: sign-in at the organisation's provider, and by a code from SMTP", function () {
  this.timeout(120_000);
  let stack: TestStack;
  let idp: TestIdp;
  let smtp: TestSmtpServer;
  before(async function () {
    this.timeout(180_000);
    requireChromium(this);
    const port = await freePort();
    smtp = await startSmtpServer();
    stack = await startStack({
      gateway: true,
      publicUrls: true,
      smtp: { url: smtp.url, from: "no-reply@vaultgate.test" },
      mailPollMs: 0,
      oidc: { issuer: `http://127.0.0.1:${port}`, clientId: "vaultgate", clientSecret: "vaultgate-idp-secret", stepUpAcr: [] },
    });
    idp = await startIdp({ redirectUris: [`${stack.url}/signin/oidc/callback`], port });
  });
  after(async () => {
    await stack?.close();
    await idp?.stop();
    await smtp?.close();
  });

  it("signs in at the provider's own login page and lands on the dashboard; prints our server time next to the provider's", async () => {
    const user = await createUser(stack);
    const sub = `chrome-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const browser = await launchPhoneBrowser();
    try {
      const page = await browser.context.newPage();
      const serverMs = { ours: 0, provider: 0 };
      page.on("requestfinished", (req) => {
        const t = req.timing();
        const ms = t.responseStart - t.requestStart;
        if (req.url().startsWith(stack.url)) serverMs.ours += ms;
        else if (req.url().startsWith(idp.issuer)) serverMs.provider += ms;
      });
      await page.goto(`${stack.url}/signin/oidc?return_to=${encodeURIComponent("/dashboard/agents")}`);
      expect(await page.title()).to.equal("Example Corp sign-in");
      await page.selectOption("#account", sub);
      await page.fill("#password", "correct horse");
      await page.click("button[type=submit]");
      expect(page.url()).to.equal(`${stack.url}/dashboard/agents`);
      // Server time only (request sent to first byte), summed over each side's requests.
      console.log(`      provider sign-in: our server ${serverMs.ours.toFixed(1)} ms, the provider's ${serverMs.provider.toFixed(1)} ms`);
    } finally {
      await browser.close();
    }
  });

  it("signs in with the six-digit code read from the SMTP server", async () => {
    const user = await createUser(stack);
    const browser = await launchPhoneBrowser();
    try {
      const page = await browser.context.newPage();
      await page.goto(`${stack.url}/signin?return_to=${encodeURIComponent("/dashboard/agents")}`);
      await signInOnPage(page, user.email, async () => {
        await stack.core.mail!.runOnce();
        return codeIn(smtp.to(user.email).at(-1)!);
      });
      expect(new URL(page.url()).pathname).to.equal("/dashboard/agents");
    } finally {
      await browser.close();
    }
  });
});
