import { request } from "node:http";
import { expect } from "chai";
import { ALL_AGENT_SCOPES, createOwner, grantFor } from "../../support/budgets.js";
import { postRpc } from "../../support/mcp.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { TOOLS } from "../../../gateways/jsonrpc/tools.js";
import { MCP_CATEGORIES, MCP_CATEGORY_SCOPES, MCP_ENDPOINTS } from "../../../lib/vocabulary.js";
import { PROTOCOL_VERSIONS } from "../../../gateways/jsonrpc/plugin.js";

/** MCP Streamable HTTP transport rules: DNS-rebinding protection, protocol version, client responses. */
describe("MCP transport guards (Origin, Host, MCP-Protocol-Version, client responses)", () => {
  let stack: TestStack;
  let token: string;
  before(async () => {
    stack = await startStack({ gateway: true });
    token = await grantFor(stack, await createOwner(stack), { scopes: ALL_AGENT_SCOPES });
  });
  after(() => stack.close());

  const list = (headers: Record<string, string> = {}, path = "/mcp/read") =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method: "tools/list" }, { authorization: `Bearer ${token}`, ...headers });

  it("refuses a foreign Origin or Host with 403 and a JSON-RPC error body; our own and loopback pass", async () => {
    for (const path of ["/mcp/read", "/mcp/write", "/mcp/treasury", "/write"]) {
      const origin = await list({ origin: "http://evil.example" }, path);
      expect(origin.status, path).to.equal(403);
      expect(origin.json!.error).to.deep.include({ code: -32600 });
      expect(origin.json!.error.data.reason_id).to.equal("origin_not_allowed");
      // fetch may not set Host; a rebinding browser sends the attacker's name, as here.
      expect(await statusWithHost(path, `evil.example:${new URL(stack.url).port}`), path).to.equal(403);
    }
    // The configured public origin (the test issuer) and a loopback Host are ours.
    expect((await list({ origin: "http://vaultgate.test" })).status).to.equal(200);
    expect((await list()).status).to.equal(200);
    // Under our configured name, its configured scheme only: an http page is not our https one.
    expect(await statusWithHost("/mcp/read", "vaultgate.test", "http://vaultgate.test")).to.equal(200);
    expect(await statusWithHost("/mcp/read", "vaultgate.test", "https://vaultgate.test")).to.equal(403);
    const loopback = `127.0.0.1:${new URL(stack.url).port}`;
    expect(await statusWithHost("/mcp/read", loopback, `http://${loopback}`)).to.equal(200);
  });

  function statusWithHost(path: string, host: string, origin?: string): Promise<number> {
    const body = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" });
    return new Promise((resolve, reject) => {
      const req = request(
        `${stack.url}${path}`,
        { method: "POST", headers: { host, "content-type": "application/json", authorization: `Bearer ${token}`, ...(origin ? { origin } : {}) } },
        (res) => {
          res.resume();
          res.on("end", () => resolve(res.statusCode!));
        },
      );
      req.on("error", reject);
      req.end(body);
    });
  }

  it("refuses a foreign Origin on registration and on page forms, before anything else runs", async () => {
    const reg = await fetch(`${stack.url}/oauth2/register`, {
      method: "POST",
      headers: { "content-type": "application/json", origin: "http://evil.example" },
      body: JSON.stringify({ client_name: "x", redirect_uris: ["http://127.0.0.1/cb"] }),
    });
    expect(reg.status).to.equal(403);
    expect(((await reg.json()) as { error: string }).error).to.equal("access_denied");
    const signin = await fetch(`${stack.url}/signin`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", origin: "http://evil.example" },
      body: "email=a%40example.test",
    });
    expect(signin.status).to.equal(403);
    expect(signin.headers.get("content-type")).to.match(/^text\/html/);
  });

  it("MCP-Protocol-Version: unsupported or malformed is 400; supported or missing passes; initialize negotiates", async () => {
    for (const v of ["1999-01-01", "2099-01-01", "not-a-version"]) {
      const res = await list({ "mcp-protocol-version": v });
      expect(res.status, v).to.equal(400);
      expect(res.json!.error.data.reason_id).to.equal("unsupported_protocol_version");
    }
    for (const v of PROTOCOL_VERSIONS) expect((await list({ "mcp-protocol-version": v })).status).to.equal(200);
    expect((await list()).status).to.equal(200);
    const init = await postRpc(
      `${stack.url}/mcp/read`,
      { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2099-01-01", capabilities: {}, clientInfo: { name: "t", version: "1" } } },
      { authorization: `Bearer ${token}`, "mcp-protocol-version": "2099-01-01" },
    );
    expect([init.status, init.json!.result.protocolVersion]).to.deep.equal([200, PROTOCOL_VERSIONS[0]]);
  });

  it("a JSON-RPC response sent by the client is accepted with 202 and no body", async () => {
    const one = await postRpc(`${stack.url}/mcp/read`, { jsonrpc: "2.0", id: 5, result: {} }, { authorization: `Bearer ${token}` });
    expect([one.status, one.text]).to.deep.equal([202, ""]);
    const err = await postRpc(`${stack.url}/mcp/read`, [{ jsonrpc: "2.0", id: 6, error: { code: -1, message: "no" } }], { authorization: `Bearer ${token}` });
    expect([err.status, err.text]).to.deep.equal([202, ""]);
  });

  it("each category has an endpoint, whose challenge and metadata name exactly the scopes of its tools", () => {
    for (const category of MCP_CATEGORIES) {
      expect(
        MCP_ENDPOINTS.some((e) => e.category === category),
        category,
      ).to.equal(true);
      const needed = new Set(TOOLS.filter((t) => t.category === category && t.scope).map((t) => t.scope!));
      expect([...MCP_CATEGORY_SCOPES[category]].sort(), category).to.deep.equal([...needed].sort());
    }
  });
});
