import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { REDIRECT, registerClient } from "../../support/agent-oauth.js";
import { expectRefused } from "../../support/refusals.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";

const ALL = ["accounts:read", "payments:initiate", "payments:simulate", "audit:stream", "agent:budget:create"];

/**
 * RFC 7591 2: an omitted scope gets the documented default (every agent scope); a scope
 * that is there but names nothing is a mistake, never a request for everything.
 */
describe("POST /oauth2/register: the scope member", function () {
  this.timeout(60_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  const clientCount = async () => (await stack.core.db.raw(`SELECT count(*)::int AS n FROM oauth_clients`)).rows[0].n as number;

  it("hostile: an empty or whitespace-only scope is refused invalid_client_metadata, and no client is registered", async () => {
    const before = await clientCount();
    for (const scope of ["", " ", "  ", "\t", " \n ", "\u00a0"]) {
      const res = await registerClient(stack, { redirect_uris: [REDIRECT], scope });
      expect([res.status, res.body.error], JSON.stringify(scope)).to.deep.equal([400, "invalid_client_metadata"]);
      expect(res.body.error_description, JSON.stringify(scope)).to.match(/scope/);
      expect(res.body.client_id, JSON.stringify(scope)).to.equal(undefined);
    }
    expect(await clientCount()).to.equal(before);
  });

  it("core refuses a blank scope from any caller, not only through the gateway", async () => {
    await expectRefused(stack.clients.grants.registerClient({ redirectUris: [REDIRECT], scope: "   " }), Reason.INVALID_CLIENT_METADATA, /scope/);
  });

  it("an omitted (or null) scope registers the documented default: every agent scope", async () => {
    for (const scope of [undefined, null]) {
      const res = await registerClient(stack, { redirect_uris: [REDIRECT], scope });
      expect(res.status, String(scope)).to.equal(201);
      expect((res.body.scope as string).split(" ")).to.have.members(ALL);
    }
  });

  it("a scope that names scopes registers exactly those", async () => {
    const res = await registerClient(stack, { redirect_uris: [REDIRECT], scope: "audit:stream" });
    expect([res.status, res.body.scope]).to.deep.equal([201, "audit:stream"]);
  });
});
