import { expect } from "chai";
import type { Browser, Page } from "playwright-core";
import { CHROMIUM, requireChromium, startLoopbackCallback } from "../support/browser.js";
import { startStack, type TestStack } from "../support/stack.js";
import { createOwner, grantFor } from "../support/budgets.js";

type Seen = { status: number; headers: Record<string, string | null>; body: unknown } | { failed: string };

/**
 * A browser-based MCP host on an allowed origin (ALLOWED_ORIGINS) calls the MCP and OAuth
 * endpoints from page JavaScript in Chromium: CORS lets it read the answers and the headers
 * it needs; any page may read the metadata documents; a foreign origin reads nothing else.
 */
describe("browser: an MCP host page on an allowed origin (CORS)", function () {
  this.timeout(120_000);
  let stack: TestStack;
  let host: Awaited<ReturnType<typeof startLoopbackCallback>>;
  let foreign: Awaited<ReturnType<typeof startLoopbackCallback>>;
  let browser: Browser;
  let token: string;

  before(async function () {
    requireChromium(this);
    host = await startLoopbackCallback("MCP host");
    foreign = await startLoopbackCallback("other site");
    stack = await startStack({ gateway: true, publicUrls: true, allowedOrigins: [new URL(host.url).origin] });
    token = await grantFor(stack, await createOwner(stack), { scopes: ["accounts:read"] });
    const { chromium } = await import("playwright-core");
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"] });
  });
  after(async () => {
    await browser?.close();
    await stack?.close();
    await host?.close();
    await foreign?.close();
  });

  /** fetch() run by a page of `pageUrl`: what page JavaScript may read of the answer. */
  async function fetchFrom(pageUrl: string, url: string, init: { method?: string; headers?: Record<string, string>; body?: string }): Promise<Seen> {
    const page: Page = await browser.newPage();
    try {
      await page.goto(pageUrl);
      return await page.evaluate(
        async ({ url, init }) => {
          try {
            const res = await fetch(url, init);
            const names = ["mcp-session-id", "www-authenticate", "x-request-id", "content-type"];
            const text = await res.text();
            return { status: res.status, headers: Object.fromEntries(names.map((n) => [n, res.headers.get(n)])), body: text ? JSON.parse(text) : null };
          } catch (err) {
            return { failed: String(err) };
          }
        },
        { url, init },
      );
    } finally {
      await page.close();
    }
  }

  const rpc = (body: object, bearer?: string) => ({
    method: "POST",
    headers: {
      "content-type": "application/json",
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2025-06-18",
      ...(bearer ? { authorization: `Bearer ${bearer}` } : {}),
    },
    body: JSON.stringify(body),
  });
  const initialize = {
    jsonrpc: "2.0",
    id: 1,
    method: "initialize",
    params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "page", version: "1" } },
  };

  it("initializes and calls a tool with a bearer, reading Mcp-Session-Id; without one it reads the 401 challenge", async () => {
    const init = (await fetchFrom(host.url, `${stack.url}/mcp/read`, rpc(initialize, token))) as Extract<Seen, { status: number }>;
    expect(init, JSON.stringify(init)).to.have.property("status", 200);
    expect(init.headers["mcp-session-id"]).to.match(/^mcp1\./);
    const call = (await fetchFrom(
      host.url,
      `${stack.url}/mcp/read`,
      rpc({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "accounts.balance" } }, token),
    )) as {
      body: { result: { structuredContent: { balance_cents: number } } };
    };
    expect(call.body.result.structuredContent.balance_cents).to.equal(0);
    const challenged = (await fetchFrom(host.url, `${stack.url}/mcp/read`, rpc(initialize))) as Extract<Seen, { status: number }>;
    expect(challenged.status).to.equal(401);
    expect(challenged.headers["www-authenticate"]).to.match(/^Bearer resource_metadata="/);
  });

  it("reads the metadata documents from any page, and OAuth endpoint answers from the allowed one only", async () => {
    for (const path of ["/.well-known/oauth-protected-resource/mcp/read", "/.well-known/oauth-authorization-server", "/.well-known/agent-jwks.json"]) {
      const doc = await fetchFrom(foreign.url, `${stack.url}${path}`, {});
      expect(doc, path).to.have.property("status", 200);
    }
    const form = {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "grant_type=refresh_token&client_id=x&refresh_token=y",
    };
    const answered = (await fetchFrom(host.url, `${stack.url}/oauth2/token`, form)) as Extract<Seen, { status: number }>;
    expect([answered.status, (answered.body as { error: string }).error]).to.deep.equal([401, "invalid_client"]);
    expect(await fetchFrom(foreign.url, `${stack.url}/oauth2/token`, form)).to.have.property("failed");
    expect(await fetchFrom(foreign.url, `${stack.url}/mcp/read`, rpc(initialize, token))).to.have.property("failed");
  });
});
