import { expect } from "chai";
import { BROWSER_ARTIFACTS, launchPhoneBrowser, requireChromium, signInOnPage, stepUpOnPage, startLoopbackCallback } from "../support/browser.js";
import { join } from "node:path";
import { ALL_AGENT_SCOPES } from "../support/budgets.js";
import { startStack, type TestStack } from "../support/stack.js";
import { createUser, latestCode } from "../support/agent-oauth.js";
import { beginSdkAuthorization, connectSdkClient, createSdkOAuthProvider } from "../support/mcp-sdk-oauth.js";


/**
 * The official MCP SDK client's OAuth support with a real browser for the user (as in
 * browser.test.ts: Debian's Chromium, playwright-core, phone viewport, JavaScript
 * disabled). The SDK meets our 401, discovers and registers, and sends the user to
 * /oauth2/authorize; Chromium signs in with the e-mailed code, steps up (the SDK asks for
 * every scope our metadata lists, payments:initiate among them) and consents, landing on
 * the host's loopback redirect; the SDK exchanges that code and calls tools with the grant.
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

  it("discovers, registers, the user signs in, steps up and consents in Chromium, and the SDK calls tools", async () => {
    const user = await createUser(stack);
    await stack.admin.budgets.fundVault({ vaultId: user.vaultId, amountCents: 4_200n });
    const provider = createSdkOAuthProvider({ redirectUrl: callbackUrl, clientName: "MCP SDK browser host" });
    const endpoint = new URL(`${stack.url}/mcp/read`);

    const { transport: first, authorizationUrl } = await beginSdkAuthorization(endpoint, provider);
    expect(provider.client).to.have.property("client_id");
    expect(authorizationUrl.origin + authorizationUrl.pathname).to.equal(`${stack.url}/oauth2/authorize`);
    expect(authorizationUrl.searchParams.get("code_challenge_method")).to.equal("S256");
    expect(authorizationUrl.searchParams.get("redirect_uri")).to.equal(callbackUrl);
    // resource: {mcp_url}, from the protected-resource metadata our 401 challenge names.
    expect(authorizationUrl.searchParams.get("resource")).to.equal(stack.url);
    // The SDK asks for the protected resource's scopes_supported: step-up scopes included.
    expect(authorizationUrl.searchParams.get("scope")!.split(" ").sort()).to.deep.equal([...ALL_AGENT_SCOPES].sort());

    const browser = await launchPhoneBrowser();
    const { context } = browser;
    let landed: URL;
    try {
      const page = context.pages()[0] ?? (await context.newPage());
      const shot = (name: string) => page.screenshot({ path: join(BROWSER_ARTIFACTS, `${name}.png`), fullPage: true });

      await page.goto(authorizationUrl.href);
      const outboxCode = () => latestCode(stack, user.email);
      await signInOnPage(page, user.email, outboxCode, { form: "mcp-sdk-01-signin", code: "mcp-sdk-02-signin-code" });
      // payments:initiate and agent:budget:create need a step-up before consent.
      await stepUpOnPage(page, outboxCode, { form: "mcp-sdk-03-stepup", code: "mcp-sdk-04-stepup-code" });

      // The MCP server URL as resource: the user picks the vault (the only one, preselected).
      expect(new URL(page.url()).pathname).to.equal("/oauth2/authorize");
      const consent = await page.textContent("main");
      expect(consent).to.include("MCP SDK browser host");
      expect(consent).to.include("Start payments from the vault");
      expect(consent).to.include("Create sub-budgets with their own spending limits");
      expect(consent).to.include(`urn:vaultgate:vault:${user.vaultId}`);
      expect(consent).to.include("marked as step-up verified");
      expect(await page.isChecked(`input[name=vault_id][value='${user.vaultId}']`)).to.equal(true);
      await shot("mcp-sdk-05-consent");
      await page.click("button[value=approve]");

      landed = new URL(page.url());
      expect(landed.origin + landed.pathname).to.equal(callbackUrl);
      expect(await page.textContent("body")).to.include("Back at the MCP host.");
      await shot("mcp-sdk-06-host-redirect");
    } finally {
      await browser.close();
    }

    expect(landed.searchParams.get("state")).to.equal(provider.stateValue);
    expect(landed.searchParams.get("iss")).to.equal(stack.url);
    const code = landed.searchParams.get("code")!;
    expect(code).to.match(/^vgc_/);
    await first.finishAuth(code);
    const accessToken = provider.saved?.access_token;
    expect(accessToken).to.be.a("string");
    const { grant } = await stack.clients.grants.verifyAgentToken({ accessToken: accessToken! });
    expect(grant!.vaultId).to.equal(user.vaultId);
    expect(grant!.stepUp).to.equal(true);

    const read = await connectSdkClient(endpoint, provider);
    const { tools } = await read.listTools();
    expect(tools.map((t) => t.name)).to.deep.equal(["accounts.balance", "audit.list"]);
    const balance = await read.callTool({ name: "accounts.balance", arguments: {} });
    expect(balance.structuredContent).to.deep.equal({ vault_id: user.vaultId, balance_cents: 4_200, currency: "USD" });
    await read.close();

    // The step-up done in the browser is on the grant: a budget is active at once (DESIGN 4.1).
    const treasury = await connectSdkClient(new URL(`${stack.url}/mcp/treasury`), provider);
    const budget = await treasury.callTool({
      name: "agent.budget.create",
      arguments: { purpose: "trip", display_name: "Trip budget", chain_allowlist: ["base"], idempotency_key: "mcp-sdk-browser-budget" },
    });
    expect(budget.structuredContent).to.include({ status: "active", policy_version: 1 });
    await treasury.close();
  });
});
