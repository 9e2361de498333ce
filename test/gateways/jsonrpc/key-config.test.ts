import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack } from "../../support/stack.js";
import { createOwner, grantFor } from "../../support/budgets.js";
import { postRpc } from "../../support/mcp.js";
import { expectJsonRpcError, expectRefused } from "../../support/refusals.js";

/** A server-side key problem is the server's: agents are told to retry, never that their token is bad (which sends them back through OAuth). */
describe("agent tools: unusable verification keys", () => {
  it("missing or malformed key configuration -> -32603 auth_unavailable, not invalid_token; core says AUTH_UNAVAILABLE", async () => {
    const good = await startStack({ gateway: true });
    const owner = await createOwner(good);
    const token = await grantFor(good, owner, { scopes: ["accounts:read"] });
    const ok = await postRpc(`${good.url}/mcp/read`, { jsonrpc: "2.0", id: 1, method: "tools/list" }, { authorization: `Bearer ${token}` });
    expect(ok.json!.result, ok.text).to.have.property("tools");
    await good.close();

    const broken = await startStack({ gateway: true, signingKey: "{not json" });
    try {
      for (const body of [
        { jsonrpc: "2.0", id: 1, method: "tools/list" },
        { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "accounts.balance", arguments: {} } },
      ]) {
        const res = await postRpc(`${broken.url}/mcp/read`, body, { authorization: `Bearer ${token}` });
        expect(res.status, res.text).to.not.equal(401);
        expectJsonRpcError(res, -32603, "auth_unavailable");
        expect(res.text).to.not.match(/SIGNING_KEY|not json/i);
      }
      await expectRefused(broken.clients.grants.verifyAgentToken({ accessToken: token }), Reason.AUTH_UNAVAILABLE);
    } finally {
      await broken.close();
    }
  });
});
