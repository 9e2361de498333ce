import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { postRpc, startMcpStack, type McpStack } from "../../support/mcp.js";
import { expectJsonRpcError, expectRefused } from "../../support/refusals.js";
import { decodeJwt, resignWithRealKey } from "../../support/trust.js";

// Hostile: the service's own key signs claims of the wrong shape (as a signing bug or a
// leaked key would); every surface refuses them as an invalid token, never an internal error.
describe("agent token claims of the wrong shape, signed with the real key", () => {
  let stack: McpStack;
  let accessToken: string;
  before(async () => {
    stack = await startMcpStack();
    const u = await stack.admin.partners.createUser({ email: `claims-${randomBytes(4).toString("hex")}@example.com` });
    const { token } = await stack.admin.grants.issueGrant({ userId: u.userId, vaultId: u.vaultId, scopes: ["accounts:read"] });
    accessToken = token!.accessToken;
  });
  after(() => stack.close());

  const balance = (token: string) =>
    postRpc(`${stack.url}/mcp/read`, { jsonrpc: "2.0", id: 1, method: "accounts.balance", params: {} }, { authorization: `Bearer ${token}` });

  it("accepts the same claims re-signed unchanged (the control)", async () => {
    const token = resignWithRealKey(stack, accessToken, {});
    expect((await stack.clients.grants.verifyAgentToken({ accessToken: token })).grant).to.not.equal(undefined);
    expect((await stack.clients.budgets.getBalance({ accessToken: token })).vaultId).to.be.a("string");
    const res = await balance(token);
    expect(res.status, res.text).to.equal(200);
    expect(res.json!.result.balance_cents).to.be.a("number");
  });

  /** Each changes the real token's claims (`p`) into a wrong shape. */
  const malformed: [string, (p: Record<string, unknown>) => Record<string, unknown>][] = [
    ["scope not a string", () => ({ scope: 42 })],
    ["scope a list", () => ({ scope: ["accounts:read"] })],
    ["act a string", () => ({ act: "agent" })],
    ["act without a string sub", () => ({ act: { sub: 5 } })],
    ["act null", () => ({ act: null })],
    ["sub a number", () => ({ sub: 7 })],
    ["client_id null", () => ({ client_id: null })],
    ["vault_id an object", () => ({ vault_id: {} })],
    ["an audience entry not a string", (p) => ({ aud: [...(p.aud as string[]), 5] })],
    ["jti not a UUID", () => ({ jti: "not-a-grant-id" })],
    ["no nbf", () => ({ nbf: undefined })],
    ["acr of another value", () => ({ acr: "mfa" })],
    ["auth_time a string", () => ({ auth_time: "yesterday" })],
  ];
  for (const [name, change] of malformed) {
    it(`refuses ${name} as invalid_token on every surface`, async () => {
      const token = resignWithRealKey(stack, accessToken, change(decodeJwt(accessToken).payload));
      await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: token }), Reason.INVALID_TOKEN);
      await expectRefused(stack.clients.budgets.getBalance({ accessToken: token }), Reason.INVALID_TOKEN);
      const res = await balance(token);
      expect(res.status, res.text).to.equal(401);
      expectJsonRpcError(res, -32001, "invalid_token");
    });
  }
});
