import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../support/stack.js";
import { createOwner, grantFor } from "../support/budgets.js";
import { createPartner } from "../support/partners.js";
import { expectJsonRpcError } from "../support/refusals.js";

/** "Café" in Latin-1: one byte (0xE9) that is not UTF-8. */
const LATIN1_CAFE = Buffer.from([0x43, 0x61, 0x66, 0xe9]);
const FORM = "application/x-www-form-urlencoded";

/** A body whose text is `before`, the raw bytes, then `after`. */
const withBytes = (before: string, bytes: Buffer, after: string) => Buffer.concat([Buffer.from(before), bytes, Buffer.from(after)]);

/**
 * Every surface refuses a body whose bytes are not UTF-8 in its own envelope, instead of reading
 * them as U+FFFD and storing that: names users later see would be corrupted without anyone knowing.
 */
describe("request bodies that are not UTF-8 (every surface, HTTP)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, provisioningLimitPerMinute: 100_000 });
  });
  after(() => stack.close());

  async function post(path: string, type: string, body: Buffer | string, headers: Record<string, string> = {}) {
    const res = await fetch(`${stack.url}${path}`, {
      method: "POST",
      headers: { "content-type": type, accept: "application/json, text/event-stream", ...headers },
      body,
    });
    const text = await res.text();
    let json: Record<string, unknown> | undefined;
    try {
      json = JSON.parse(text) as Record<string, unknown>;
    } catch {
      json = undefined;
    }
    return { status: res.status, text, json };
  }

  it("agent.budget.create: -32700 saying so, and nothing provisioned under its key; the name in UTF-8 is created", async () => {
    const token = await grantFor(stack, await createOwner(stack), { stepUp: true });
    const auth = { authorization: `Bearer ${token}` };
    const key = `utf8-${randomUUID()}`;
    const call = (name: string) => `{"jsonrpc":"2.0","id":1,"method":"agent.budget.create","params":{"purpose":"trip","display_name":"${name}`;
    const rest = `","chain_allowlist":["base"],"idempotency_key":"${key}"}}`;
    const refused = await post("/mcp/treasury", "application/json", withBytes(call(""), Buffer.from([0xff, 0xfe]), rest), auth);
    expect(refused.status, refused.text).to.equal(200);
    expect(expectJsonRpcError(refused, -32700, "parse_error").message).to.equal("Parse error: request body is not valid UTF-8");
    const latin1 = await post("/mcp/treasury", "application/json", withBytes(call("Caf"), Buffer.from([0xe9]), rest), auth);
    expectJsonRpcError(latin1, -32700, "parse_error");
    // Had either been stored, this would conflict with it; the name kept is the one sent.
    const created = await post("/mcp/treasury", "application/json", call("Café") + rest, auth);
    expect(created.json?.result, created.text).to.include({ status: "active" });
    expect((await post("/mcp/treasury", "application/json", call("Café") + rest, auth)).json?.result).to.deep.equal(created.json?.result);
    expectJsonRpcError(await post("/mcp/treasury", "application/json", call("\uFFFD\uFFFD") + rest, auth), -32602, "idempotency_conflict");
  });

  it("dynamic registration: 400 invalid_client_metadata saying so; the same name in UTF-8 is registered", async () => {
    const body = (name: Buffer) => withBytes('{"client_name":"', name, '","redirect_uris":["http://127.0.0.1:9/callback"]}');
    const refused = await post("/oauth2/register", "application/json", body(LATIN1_CAFE));
    expect([refused.status, refused.json?.error, refused.json?.error_description]).to.deep.equal([
      400,
      "invalid_client_metadata",
      "request body is not valid UTF-8",
    ]);
    const registered = await post("/oauth2/register", "application/json", body(Buffer.from("Café")));
    expect([registered.status, registered.json?.client_name], registered.text).to.deep.equal([201, "Café"]);
  });

  it("token forms (agent token and revocation, partner token): 400 invalid_request saying so; the same form in ASCII is read", async () => {
    const partner = await createPartner(stack);
    const basic = `Basic ${Buffer.from(`${partner.clientId}:${partner.clientSecret}`).toString("base64")}`;
    const form = (bytes: Buffer) => withBytes("grant_type=client_credentials&note=", bytes, "");
    for (const [path, headers] of [
      ["/oauth2/token", {}],
      ["/oauth2/revoke", {}],
      ["/api/partner/oauth/token", { authorization: basic }],
    ] as const) {
      const refused = await post(path, FORM, form(LATIN1_CAFE), headers);
      expect([refused.status, refused.json?.error, refused.json?.error_description], path).to.deep.equal([
        400,
        "invalid_request",
        "request body is not valid UTF-8",
      ]);
    }
    const minted = await post("/api/partner/oauth/token", FORM, "grant_type=client_credentials", { authorization: basic });
    expect(minted.status, minted.text).to.equal(200);
  });

  it("the sign-in page's form: a 400 page; partner resources and other JSON: 400 saying so, never a 500", async () => {
    const page = await post("/signin", FORM, withBytes("email=", LATIN1_CAFE, "%40example.com"), { origin: stack.url });
    expect(page.status, page.text.slice(0, 300)).to.equal(400);
    expect(page.text).to.include("The form could not be read.");
    const other = await post("/nowhere", "application/json", withBytes('{"a":"', LATIN1_CAFE, '"}'));
    expect([other.status, other.json?.message]).to.deep.equal([400, "request body is not valid UTF-8"]);
    const resource = await post("/api/partner/users", "application/json", withBytes('{"email":"', LATIN1_CAFE, '@example.com"}'), {
      authorization: "Bearer x",
    });
    expect(resource.status, resource.text).to.be.within(400, 401);
    expect(stack.logs.text(), "no stack in the log").to.not.match(/"stack":"[^"]/);
  });
});
