import { expect } from "chai";
import { BROWSER_ARTIFACTS, launchPhoneBrowser, requireChromium, signInOnPage, stepUpOnPage, startLoopbackCallback } from "../support/browser.js";
import { join } from "node:path";
import { startStack, type TestStack } from "../support/stack.js";
import { createUser, latestCode, pkce, postForm, registerClient } from "../support/agent-oauth.js";
import { expectRefused } from "../support/refusals.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";

/**
 * Headless Chromium (Debian's package, driven by playwright-core) signs in, steps up,
 * consents, lands on the client's redirect with a code, then revokes on the dashboard,
 * on a phone-sized viewport with JavaScript disabled.
 */
describe("browser: sign-in, step-up, consent, dashboard revoke (headless Chromium)", function () {
  this.timeout(120_000);
  let stack: TestStack;
  let callback: Awaited<ReturnType<typeof startLoopbackCallback>>;
  let callbackUrl: string;

  before(async function () {
    requireChromium(this);
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
    callback = await startLoopbackCallback("client");
    callbackUrl = callback.url;
  });

  after(async () => {
    await stack?.close();
    await callback?.close();
  });

  it("runs the whole consent flow and a dashboard revocation", async () => {
    const browser = await launchPhoneBrowser();
    const { context } = browser;
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      const shot = (name: string) => page.screenshot({ path: join(BROWSER_ARTIFACTS, `${name}.png`), fullPage: true });
      const user = await createUser(stack);
      const client = (await registerClient(stack, { client_name: "Browser test agent", redirect_uris: [callbackUrl] })).body;
      const { challenge, verifier } = pkce();
      const q = new URLSearchParams({
        response_type: "code",
        client_id: client.client_id,
        redirect_uri: callbackUrl,
        code_challenge: challenge,
        code_challenge_method: "S256",
        scope: "accounts:read payments:initiate",
        resource: `urn:vaultgate:vault:${user.vaultId}`,
        state: "browser-state",
      });

      await page.goto(`${stack.url}/oauth2/authorize?${q}`);
      const outboxCode = () => latestCode(stack, user.email);
      await signInOnPage(page, user.email, outboxCode, { form: "01-signin", code: "02-signin-code" });
      // payments:initiate needs a step-up before consent.
      await stepUpOnPage(page, outboxCode, { form: "03-stepup", code: "04-stepup-code" });

      expect(new URL(page.url()).pathname).to.equal("/oauth2/authorize");
      const consent = await page.textContent("main");
      expect(consent).to.include("Browser test agent");
      expect(consent).to.include("Start payments from the vault");
      expect(consent).to.include(user.vaultId);
      await shot("05-consent");
      await page.click("button[value=approve]");

      const landed = new URL(page.url());
      expect(landed.origin + landed.pathname).to.equal(callbackUrl);
      expect(landed.searchParams.get("state")).to.equal("browser-state");
      expect(landed.searchParams.get("iss")).to.equal(stack.url);
      const code = landed.searchParams.get("code")!;
      expect(code).to.match(/^vgc_/);
      await shot("06-client-redirect");

      const token = await postForm(`${stack.url}/oauth2/token`, {
        grant_type: "authorization_code",
        code,
        redirect_uri: callbackUrl,
        code_verifier: verifier,
        client_id: client.client_id,
        client_secret: client.client_secret,
      });
      expect(token.status).to.equal(200);
      const accessToken = token.body.access_token as string;
      const { grant } = await stack.clients.grants.verifyAgentToken({ accessToken });
      expect(grant!.stepUp).to.equal(true);

      await page.goto(`${stack.url}/dashboard/agents`);
      await shot("07-dashboard");
      await page.click("text=Browser test agent");
      expect(new URL(page.url()).pathname).to.equal(`/dashboard/agents/${grant!.agentPrincipalId}`);
      await shot("08-agent");
      await page.click(`form[action$='/grants/${grant!.grantId}/revoke'] button`);
      expect(await page.textContent("main")).to.include("The grant was revoked");
      await shot("09-revoked");

      await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken }), Reason.INVALID_TOKEN);
    } finally {
      await browser.close();
    }
  });
});
