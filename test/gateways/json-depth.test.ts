import { expect } from "chai";
import { createPartner, mintPartnerToken } from "../support/partners.js";
import { startStack, type TestStack } from "../support/stack.js";

/** A JSON array nested `depth` levels deep, holding one string. */
const nested = (depth: number, inner = '"x"') => "[".repeat(depth) + inner + "]".repeat(depth);
/** An object `depth` levels deep: {"a":{"a":...{"a":1}}}. */
const nestedObject = (depth: number) => `${'{"a":'.repeat(depth - 1)}{"a":1}${"}".repeat(depth - 1)}`;
/** One level, but a string full of brackets (and escaped quotes) that must not count. */
const bracketsInString = JSON.stringify({ note: `${"[{".repeat(200)}\\"${"[".repeat(100)}` });

/** The parsed body, read as the surface under test writes its refusals (undefined when not JSON). */
interface Answer<Body> {
  status: number;
  body: string;
  json?: Body;
}
/** The partner API's error envelope. */
type PartnerBody = { error?: { code?: string; request_id?: string } };
/** One JSON-RPC response. */
type RpcBody = { error?: { code?: number } };
/** An OAuth error (RFC 7591 for dynamic registration). */
type OAuthBody = { error?: string; error_description?: string };
/** fastify's own error body. */
type FastifyBody = { message?: string };

/**
 * Every JSON body parser refuses nesting deeper than 64 levels in its own surface's
 * envelope, before anything recurses over the value; 64 levels are JSON like any other.
 * Never a 500, and no stack in the log.
 */
describe("JSON nesting depth (every surface, HTTP)", () => {
  let stack: TestStack;
  let partnerToken: string;
  let treasuryToken: string;

  before(async () => {
    stack = await startStack({ gateway: true });
    const partner = await createPartner(stack, { entitlements: ["kyc:read", "treasury:write"] });
    partnerToken = await mintPartnerToken(stack, partner, "kyc:read");
    treasuryToken = await mintPartnerToken(stack, partner, "treasury:write");
  });
  after(() => stack.close());

  async function post<Body>(path: string, body: string, headers: Record<string, string> = {}): Promise<Answer<Body>> {
    const res = await fetch(`${stack.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
    const text = await res.text();
    let json: Body | undefined;
    try {
      json = JSON.parse(text) as Body;
    } catch {
      json = undefined;
    }
    return { status: res.status, body: text, json };
  }

  function expectNoStackLogged() {
    const text = stack.logs.text();
    expect(text, "no stack in the log").to.not.match(/"stack":"[^"]|Maximum call stack|RangeError/);
  }

  const bodies = (depth: number) => [nested(depth), nestedObject(depth)];

  it("partner REST: 400 invalid_json beyond 64 levels; 64 levels and brackets in strings are JSON", async () => {
    const surfaces: { path: string; headers: Record<string, string> }[] = [
      { path: "/api/partner/users", headers: { authorization: `Bearer ${partnerToken}` } },
      { path: "/api/partner/treasury/payouts", headers: { authorization: `Bearer ${treasuryToken}`, "idempotency-key": "json-depth-test-key" } },
    ];
    for (const { path, headers } of surfaces) {
      for (const body of [...bodies(65), ...(path.includes("treasury") ? [nested(10_000)] : [])]) {
        const res = await post<PartnerBody>(path, body, headers);
        expect([res.status, res.json?.error?.code], `${path} ${body.length} B`).to.deep.equal([400, "invalid_json"]);
        expect(res.json!.error!.request_id).to.be.a("string");
      }
      for (const body of [...bodies(64), bracketsInString]) {
        const res = await post<PartnerBody>(path, body, headers);
        expect(res.status, `${path}: ${res.body}`).to.be.below(500);
        expect(res.json?.error?.code, `${path}: parsed as JSON`).to.not.equal("invalid_json");
      }
    }
    expectNoStackLogged();
  });

  it("JSON-RPC: -32700 parse error beyond 64 levels; 64 levels are parsed", async () => {
    for (const body of [...bodies(65), nested(10_000)]) {
      const res = await post<RpcBody>("/mcp/read", body);
      expect(res.status, res.body).to.equal(200);
      expect(res.json!.error!.code).to.equal(-32700);
    }
    for (const body of bodies(64)) {
      const res = await post<RpcBody | RpcBody[]>("/mcp/read", body);
      expect(res.status, res.body).to.be.below(500);
      const errors = (Array.isArray(res.json) ? res.json : [res.json]).map((r) => r?.error?.code);
      expect(errors, res.body).to.not.include(-32700);
    }
    const inString = await post<RpcBody>("/mcp/read", JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list", params: { cursor: "[".repeat(500) } }));
    expect(inString.json?.error?.code).to.not.equal(-32700);
    expectNoStackLogged();
  });

  it("dynamic registration: 400 invalid_client_metadata beyond 64 levels, as for any body that is not JSON it takes", async () => {
    const notJson = await post<OAuthBody>("/oauth2/register", "{");
    expect([notJson.status, notJson.json!.error]).to.deep.equal([400, "invalid_client_metadata"]);
    for (const body of [...bodies(65), nested(5_000)]) {
      const res = await post<OAuthBody>("/oauth2/register", body);
      expect([res.status, res.json?.error], res.body).to.deep.equal([400, "invalid_client_metadata"]);
      expect(res.json!.error_description).to.match(/deeper than 64|nested more than 64/);
    }
    // 10,000 levels are 20 KB, over the endpoint's 16 KiB: refused for size, still not a 500.
    const huge = await post<OAuthBody>("/oauth2/register", nested(10_000));
    expect([huge.status, huge.json?.error]).to.deep.equal([400, "invalid_client_metadata"]);
    for (const body of bodies(64)) {
      const res = await post<OAuthBody>("/oauth2/register", body);
      expect(res.status, res.body).to.equal(400);
      expect(res.json!.error_description, "parsed, then refused for its shape").to.not.match(/nested more than 64|not valid JSON/);
    }
    expectNoStackLogged();
  });

  it("every other JSON body (pages, unknown paths): 400 beyond 64 levels, never a 500", async () => {
    for (const path of ["/signin", "/dashboard/kill-switch", "/nowhere"]) {
      for (const body of [...bodies(65), nested(10_000)]) {
        const res = await post<FastifyBody>(path, body);
        expect(res.status, `${path}: ${res.body.slice(0, 200)}`).to.be.within(400, 499);
        // fastify's own JSON parser (outside the three surfaces) makes the same check.
        if (path === "/nowhere") expect([res.status, res.json?.message]).to.deep.equal([400, "JSON nested more than 64 levels deep"]);
      }
      for (const body of bodies(64)) {
        const res = await post(path, body);
        expect(res.status, `${path}: ${res.body.slice(0, 200)}`).to.be.below(500);
      }
    }
    expectNoStackLogged();
  });
});
