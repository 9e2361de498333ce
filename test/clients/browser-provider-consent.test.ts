import { expect } from "chai";
import type { Page } from "playwright-core";
import { createUser, pkce, postForm, registerClient } from "../support/agent-oauth.js";
import { launchPhoneBrowser, requireChromium, startLoopbackCallback } from "../support/browser.js";
import { startIdp, type TestIdp } from "../support/oidc-idp.js";
import { startStack, type TestStack } from "../support/stack.js";
import { freePort } from "../support/ports.js";

// Chromium (JavaScript off) on a provider-only deployment whose step-up needs acr "mfa": authorize,
// sign in and step up at the provider from the consent flow, consent, and the agent's code
// exchange yields a step-up token with payments:initiate.
describe("browser: consenting to payments:initiate with a step-up at the organisation's provider", function () {
  this.timeout(120_000);
  let stack: TestStack;
  let idp: TestIdp;
  let callback: Awaited<ReturnType<typeof startLoopbackCallback>>;

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
    callback = await startLoopbackCallback("agent");
  });
  after(async () => {
    await stack?.close();
    await idp?.stop();
    await callback?.close();
  });

  async function loginAtProvider(page: Page, sub: string, login: { acr: string; amr: string[] }) {
    await idp.setLogin(login);
    expect(await page.title()).to.equal("Example Corp sign-in");
    await page.selectOption("#account", sub);
    await page.fill("#password", "correct horse");
    await page.click("button[type=submit]");
  }

  /** An agent asking for payments:initiate on a new user's vault, and the user's account at the provider. */
  async function agentRequest(state: string) {
    const user = await createUser(stack);
    const sub = `consent-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const client = (await registerClient(stack, { client_name: "Payments agent", redirect_uris: [callback.url] })).body;
    const { challenge, verifier } = pkce();
    const q = new URLSearchParams({
      response_type: "code",
      client_id: client.client_id,
      redirect_uri: callback.url,
      code_challenge: challenge,
      code_challenge_method: "S256",
      scope: "accounts:read payments:initiate",
      resource: `urn:vaultgate:vault:${user.vaultId}`,
      state,
    });
    return { user, sub, client, verifier, authorizeUrl: `${stack.url}/oauth2/authorize?${q}` };
  }

  /** Authorize, then sign in at the provider with a password only: the consent flow asks for a step-up. */
  async function toStepUp(page: Page, authorizeUrl: string, sub: string) {
    await page.goto(authorizeUrl);
    expect(new URL(page.url()).pathname).to.equal("/signin");
    await page.click("text=Sign in with your organisation");
    await loginAtProvider(page, sub, { acr: "pwd", amr: ["pwd"] });
    expect(new URL(page.url()).pathname).to.equal("/stepup");
    // Only the provider is offered for the step-up: no e-mailed code.
    expect(await page.locator("input[name=code]").count()).to.equal(0);
  }

  it("steps up at the provider on the way to consent; the agent's code exchange yields payments:initiate", async () => {
    const { user, sub, client, verifier, authorizeUrl } = await agentRequest("consent-mfa");
    const browser = await launchPhoneBrowser();
    let code: string;
    try {
      const page = browser.context.pages()[0] ?? (await browser.context.newPage());
      await toStepUp(page, authorizeUrl, sub);
      await page.click("text=Confirm at your organisation");
      await loginAtProvider(page, sub, { acr: "mfa", amr: ["pwd", "otp"] });

      expect(new URL(page.url()).pathname).to.equal("/oauth2/authorize");
      const consent = await page.textContent("main");
      expect(consent).to.include("Payments agent");
      expect(consent).to.include("Start payments from the vault");
      expect(consent).to.include(user.vaultId);
      await page.click("button[value=approve]");

      const landed = new URL(page.url());
      expect(landed.origin + landed.pathname).to.equal(callback.url);
      expect(landed.searchParams.get("state")).to.equal("consent-mfa");
      code = landed.searchParams.get("code")!;
    } finally {
      await browser.close();
    }
    const token = await postForm(`${stack.url}/oauth2/token`, {
      grant_type: "authorization_code",
      code,
      redirect_uri: callback.url,
      code_verifier: verifier,
      client_id: client.client_id,
      client_secret: client.client_secret,
    });
    expect(token.status).to.equal(200);
    expect(String(token.body.scope).split(" ")).to.include("payments:initiate");
    const { grant } = await stack.clients.grants.verifyAgentToken({ accessToken: token.body.access_token as string });
    expect(grant!.stepUp).to.equal(true);
    expect(grant!.scopes).to.include("payments:initiate");
  });

  it("a step-up at the provider with too weak an acr/amr is a page saying what to do, and consent stays out of reach", async () => {
    const { sub, authorizeUrl } = await agentRequest("consent-weak");
    const browser = await launchPhoneBrowser();
    try {
      const page = browser.context.pages()[0] ?? (await browser.context.newPage());
      await toStepUp(page, authorizeUrl, sub);
      await page.click("text=Confirm at your organisation");
      const refused = page.waitForResponse((r) => new URL(r.url()).pathname === "/signin/oidc/callback");
      await loginAtProvider(page, sub, { acr: "pwd", amr: ["pwd"] });
      expect((await refused).status()).to.equal(403);
      const text = await page.textContent("main");
      expect(text).to.match(/try the confirmation again/);
      expect(text).not.to.match(/at .*\.ts:\d+|Error:/);

      // Back to the agent's request: still the step-up, never the consent form.
      await page.goto(authorizeUrl);
      expect(new URL(page.url()).pathname).to.equal("/stepup");
      expect(await page.locator("button[value=approve]").count()).to.equal(0);
    } finally {
      await browser.close();
    }
  });
});
