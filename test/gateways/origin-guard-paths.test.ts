import { request } from "node:http";
import { expect } from "chai";
import { startStack, type TestStack } from "../support/stack.js";

interface Answer {
  status: number;
  type: string;
  body: string;
}

/**
 * Every spelling of a guarded path from a foreign Origin is refused like the plain path. Raw
 * paths go through node:http because fetch would resolve dot segments itself.
 */
describe("Origin/Host guard on encoded and unnormalized paths (HTTP)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack.close());

  function post(path: string, headers: Record<string, string>, body: string): Promise<Answer> {
    const { hostname, port } = new URL(stack.url);
    return new Promise((resolve, reject) => {
      const req = request({ host: hostname, port, path, method: "POST", headers: { ...headers, "content-length": String(Buffer.byteLength(body)) } }, (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => resolve({ status: res.statusCode!, type: String(res.headers["content-type"] ?? ""), body: text }));
      });
      req.on("error", reject);
      req.end(body);
    });
  }

  const FOREIGN = "http://evil.example";
  const rpc = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" });
  const registration = JSON.stringify({ client_name: "x", redirect_uris: ["http://127.0.0.1:9/cb"] });

  const MCP_SPELLINGS = [
    "/mcp/write",
    "/%6dcp/write",
    "/%6Dcp/write",
    "/%6d%63%70/%77%72%69%74%65",
    "/mcp/%77rite",
    "/%256dcp/write",
    "/mcp/./write",
    "/x/../mcp/write",
    "/mcp/%2e/write",
    "/mcp//write",
    "//mcp/write",
    "/mcp/write/",
    "/mcp/write?x=1",
    "/%6dcp/write?x=%2f",
    "/%6Dcp/%54reasury",
  ];

  it("MCP endpoints: a foreign Origin is refused with the JSON-RPC 403 on every spelling", async () => {
    for (const path of MCP_SPELLINGS) {
      const res = await post(path, { "content-type": "application/json", origin: FOREIGN }, rpc);
      expect(res.status, path).to.equal(403);
      const body = JSON.parse(res.body) as { error: { code: number; data: { reason_id: string } } };
      expect(body.error.code, path).to.equal(-32600);
      expect(body.error.data.reason_id, path).to.equal("origin_not_allowed");
    }
  });

  it("the router really serves a percent-encoded MCP path (so the guard must see it): our own Origin reaches the endpoint", async () => {
    for (const path of ["/%6dcp/write", "/%6Dcp/write", "/mcp/%77rite"]) {
      const res = await post(path, { "content-type": "application/json", origin: "http://vaultgate.test" }, rpc);
      // No bearer: the endpoint itself answers 401 with its challenge.
      expect(res.status, path).to.equal(401);
    }
  });

  it("dynamic registration: a foreign Origin is refused with the OAuth 403 on every spelling", async () => {
    for (const path of [
      "/oauth2/register",
      "/oauth2/%72egister",
      "/oauth2/%72%65gister",
      "/%6Fauth2/register",
      "/oauth2/./register",
      "/x/../oauth2/register",
      "/oauth2//register",
      "/oauth2/register/",
    ]) {
      const res = await post(path, { "content-type": "application/json", origin: FOREIGN }, registration);
      expect(res.status, path).to.equal(403);
      expect((JSON.parse(res.body) as { error: string }).error, path).to.equal("access_denied");
    }
    const routed = await post("/oauth2/%72egister", { "content-type": "application/json" }, registration);
    expect(routed.status, "the encoded path is the registration endpoint").to.equal(201);
  });

  it("page forms: a foreign Origin is refused with the HTML 403 on every spelling", async () => {
    for (const path of ["/signin", "/%73ignin", "/%73IGNIN", "/./signin", "//signin", "/dashboard/../signin", "/%64ashboard/kill-switch"]) {
      const res = await post(path, { "content-type": "application/x-www-form-urlencoded", origin: FOREIGN }, "email=a%40example.test");
      expect(res.status, path).to.equal(403);
      expect(res.type, path).to.match(/^text\/html/);
    }
  });
});
