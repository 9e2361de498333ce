import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";

/** GET / answers something useful for a person, and the same addresses as JSON for programs. */
describe("web pages: the home page", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true });
  });
  after(() => stack.close());

  it("a browser gets a page linking the dashboard, the OpenAPI document and the MCP endpoints", async () => {
    const res = await fetch(`${stack.url}/`, { headers: { accept: "text/html" } });
    expect(res.status).to.equal(200);
    expect(res.headers.get("content-type")).to.match(/^text\/html/);
    const text = await res.text();
    expect(text).to.include(`href="${stack.url}/dashboard/agents"`);
    expect(text).to.include(`href="${stack.url}/api/partner/openapi.json"`);
    expect(text).to.include(`${stack.url}/mcp/read`);
  });

  it("a client asking for JSON gets the addresses, and every one of them answers", async () => {
    const res = await fetch(`${stack.url}/`, { headers: { accept: "application/json" } });
    const body = (await res.json()) as { service: string; links: Record<string, string | string[]> };
    expect(body.service).to.equal("vaultgate");
    for (const key of ["openapi", "authorization_server_metadata", "jwks", "health", "readiness"]) {
      expect((await fetch(body.links[key] as string)).status, key).to.equal(200);
    }
  });
});
