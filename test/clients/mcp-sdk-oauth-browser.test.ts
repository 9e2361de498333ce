import { expect } from "chai";
import { BROWSER_ARTIFACTS, launchPhoneBrowser, requireChromium, signInOnPage, stepUpOnPage, startLoopbackCallback } from "../support/browser.js";
import { join } from "node:path";
import { startStack, type TestStack } from "../support/stack.js";
import { createUser, latestCode } from "../support/agent-oauth.js";
import { beginSdkAuthorization, connectSdkClient, createSdkOAuthProvider } from "../support/mcp-sdk-oauth.js";

/**
 * The MCP SDK client's OAuth with headless Chromium for the user (sign-in, step-up, consent),
 * then tools with the grant. Each endpoint's challenge names only its own scopes, so the SDK
 * asks for no more than it will use.
 */
describe("browser: MCP SDK client OAuth, pages driven in headless Chromium", function () {
  this.timeout(120_000);
  let stack: TestStack;
  let callback: Awaited<ReturnType<typeof startLoopbackCallback>>;
  let callbackUrl: string;

  before(async function () {
    requireChromium(this);
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
    callback = await startLoopbackCallback("MCP host");
    callbackUrl = callback.url;
  });

  after(async () => {
    await stack?.close();
    await callback?.close();
  });

  /** Drives the pages in Chromium from the SDK's authorization URL to the host's redirect; returns the code. */
  async function approveInBrowser(
    authorizationUrl: URL,
    email: string,
    prefix: string,
    expectStepUp: boolean,
    consentIncludes: string[],
    consentExcludes: string[],
  ) {
    const browser = await launchPhoneBrowser();
    try {
      const page = browser.context.pages()[0] ?? (await browser.context.newPage());
      const shot = (name: string) => page.screenshot({ path: join(BROWSER_ARTIFACTS, `${prefix}-${name}.png`), fullPage: true });
      await page.goto(authorizationUrl.href);
      const outboxCode = () => latestCode(stack, email);
      await signInOnPage(page, email, outboxCode, { form: `${prefix}-01-signin`, code: `${prefix}-02-signin-code` });
      if (expectStepUp) await stepUpOnPage(page, outboxCode, { form: `${prefix}-03-stepup`, code: `${prefix}-04-stepup-code` });
      // Straight to consent: no step-up page unless the scopes need one.
      expect(new URL(page.url()).pathname).to.equal("/oauth2/authorize");
      const consent = (await page.textContent("main"))!;
      for (const text of consentIncludes) expect(consent).to.include(text);
      for (const text of consentExcludes) expect(consent).to.not.include(text);
      await shot("05-consent");
      await page.click("button[value=approve]");
      const landed = new URL(page.url());
      expect(landed.origin + landed.pathname).to.equal(callbackUrl);
      expect(await page.textContent("body")).to.include("Back at the MCP host.");
      await shot("06-host-redirect");
      return landed;
    } finally {
      await browser.close();
    }
  }

  const tokenClaims = (token: string) => JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString()) as { aud: string[]; acr?: string };

  it("least privilege: connecting to /mcp/read asks only for accounts:read audit:stream, needs no step-up, and the token's aud names /mcp/read", async () => {
    const user = await createUser(stack);
    await stack.admin.budgets.fundVault({ vaultId: user.vaultId, amountCents: 4_200n });
    const provider = createSdkOAuthProvider({ redirectUrl: callbackUrl, clientName: "MCP SDK browser host" });
    const endpoint = new URL(`${stack.url}/mcp/read`);

    const { transport: first, authorizationUrl } = await beginSdkAuthorization(endpoint, provider);
    expect(provider.client).to.have.property("client_id");
    expect(authorizationUrl.origin + authorizationUrl.pathname).to.equal(`${stack.url}/oauth2/authorize`);
    expect(authorizationUrl.searchParams.get("code_challenge_method")).to.equal("S256");
    expect(authorizationUrl.searchParams.get("redirect_uri")).to.equal(callbackUrl);
    // resource and scope come from the endpoint's own challenge and metadata.
    expect(authorizationUrl.searchParams.get("resource")).to.equal(`${stack.url}/mcp/read`);
    expect(authorizationUrl.searchParams.get("scope")!.split(" ").sort()).to.deep.equal(["accounts:read", "audit:stream"]);

    const landed = await approveInBrowser(
      authorizationUrl,
      user.email,
      "mcp-sdk-read",
      false,
      ["MCP SDK browser host", "See the balance of the vault", `urn:vaultgate:vault:${user.vaultId}`],
      ["Start payments from the vault", "Create sub-budgets"],
    );
    expect(landed.searchParams.get("state")).to.equal(provider.stateValue);
    expect(landed.searchParams.get("iss")).to.equal(stack.url);
    const code = landed.searchParams.get("code")!;
    expect(code).to.match(/^vgc_/);
    await first.finishAuth(code);
    const accessToken = provider.saved!.access_token;
    const claims = tokenClaims(accessToken);
    expect(claims.aud).to.include(`${stack.url}/mcp/read`);
    expect(claims.aud).to.include(stack.url);
    expect(claims.acr).to.equal(undefined);
    const { grant } = await stack.clients.grants.verifyAgentToken({ accessToken });
    expect([grant!.vaultId, grant!.stepUp, [...grant!.scopes].sort()]).to.deep.equal([user.vaultId, false, ["accounts:read", "audit:stream"]]);

    const read = await connectSdkClient(endpoint, provider);
    const { tools } = await read.listTools();
    expect(tools.map((t) => t.name)).to.deep.equal(["payments.get", "accounts.balance", "audit.list"]);
    const balance = await read.callTool({ name: "accounts.balance", arguments: {} });
    expect(balance.structuredContent).to.deep.equal({ vault_id: user.vaultId, balance_cents: 4_200, currency: "USD" });
    await read.close();
    // The refreshed token keeps the exact audience.
    const refreshed = await stack.clients.grants.refreshGrant({
      refreshToken: provider.saved!.refresh_token!,
      clientId: provider.client!.client_id,
      clientSecret: provider.client!.client_secret!,
    });
    expect(tokenClaims(refreshed.token!.accessToken).aud).to.include(`${stack.url}/mcp/read`);
  });

  it("connecting to /mcp/treasury asks for agent:budget:create: the user steps up in Chromium and a budget is active at once", async () => {
    const user = await createUser(stack);
    const provider = createSdkOAuthProvider({ redirectUrl: callbackUrl, clientName: "MCP SDK treasury host" });
    const endpoint = new URL(`${stack.url}/mcp/treasury`);
    const { transport: first, authorizationUrl } = await beginSdkAuthorization(endpoint, provider);
    expect(authorizationUrl.searchParams.get("resource")).to.equal(`${stack.url}/mcp/treasury`);
    expect(authorizationUrl.searchParams.get("scope")).to.equal("agent:budget:create");
    const landed = await approveInBrowser(
      authorizationUrl,
      user.email,
      "mcp-sdk-treasury",
      true,
      ["Create sub-budgets with their own spending limits", "marked as step-up verified"],
      ["Start payments from the vault"],
    );
    await first.finishAuth(landed.searchParams.get("code")!);
    expect(tokenClaims(provider.saved!.access_token).acr).to.equal("step-up");
    const treasury = await connectSdkClient(endpoint, provider);
    const budget = await treasury.callTool({
      name: "agent.budget.create",
      arguments: { purpose: "trip", display_name: "Trip budget", chain_allowlist: ["base"], idempotency_key: "mcp-sdk-browser-budget" },
    });
    expect(budget.structuredContent).to.include({ status: "active", policy_version: 1 });
    await treasury.close();
  });
});
