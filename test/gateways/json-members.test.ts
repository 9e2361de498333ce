import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { createPartner, mintPartnerToken } from "../support/partners.js";
import { expectHttpError, expectJsonRpcError } from "../support/refusals.js";
import { api } from "../support/resources.js";
import { startStack, type TestStack } from "../support/stack.js";

/**
 * A body naming one member twice in an object is refused on every JSON surface: JSON.parse
 * keeps the last, a proxy or log reader may keep the first, and money must not be guessed at.
 */
describe("JSON objects that repeat a member (HTTP)", () => {
  let stack: TestStack;
  let treasuryToken: string;

  before(async () => {
    stack = await startStack({ gateway: true });
    treasuryToken = await mintPartnerToken(stack, await createPartner(stack, { entitlements: ["treasury:write"] }), "treasury:write");
  });
  after(() => stack.close());

  it("partner API: 400 invalid_json naming the member", async () => {
    const item = `{"execution_id":"e1","payout_id":"p1","recipient":{"user_id":"${randomUUID()}"},"amount_cents":1,"currency":"USD","reference":"r","amount_cents":100000}`;
    const res = await api(stack, "POST", "/treasury/payouts", {
      token: treasuryToken,
      rawBody: `{"payer_entity_id":"${randomUUID()}","items":[${item}]}`,
      headers: { "idempotency-key": "json-members-test" },
    });
    expectHttpError(res, 400, "invalid_json");
    expect((res.body as { error: { message: string } }).error.message).to.equal(`member "amount_cents" appears twice in one object`);
  });

  it("JSON-RPC: one -32600 for the whole body; the same names in two calls of a batch are fine", async () => {
    const post = async (body: string) => {
      const res = await fetch(`${stack.url}/mcp/read`, { method: "POST", headers: { "content-type": "application/json", accept: "application/json" }, body });
      const text = await res.text();
      return { status: res.status, text, json: JSON.parse(text) as unknown };
    };
    const repeated = await post(`{"jsonrpc":"2.0","id":1,"method":"ping","method":"tools/list"}`);
    expect(repeated.status).to.equal(200);
    const e = expectJsonRpcError(repeated, -32600, "invalid_request");
    expect(e.message).to.equal(`Invalid Request: member "method" appears twice in one object`);
    expect((repeated.json as { id: unknown }).id).to.equal(null);

    // Answered call by call (each wants a bearer), not refused whole.
    const batch = await post(`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]`);
    const replies = batch.json as { id: number; error: { code: number } }[];
    expect(replies.map((r) => [r.id, r.error.code])).to.deep.equal([
      [1, -32001],
      [2, -32001],
    ]);
  });

  it("client registration: 400 invalid_client_metadata, and no client is made", async () => {
    const res = await fetch(`${stack.url}/oauth2/register`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: `{"client_name":"twice","redirect_uris":["http://127.0.0.1:9/a"],"redirect_uris":["http://127.0.0.1:9/b"]}`,
    });
    expect(res.status).to.equal(400);
    expect(await res.json()).to.deep.equal({
      error: "invalid_client_metadata",
      error_description: `member 'redirect_uris' appears twice in one object`,
    });
    expect(await stack.core.db("oauth_clients").where({ client_name: "twice" })).to.have.length(0);
  });
});
