import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { fixtures, type Fixtures } from "../../support/trust.js";
import type { JsonRpcReply } from "../../support/mcp.js";
import { postJsonRpc } from "../../support/replicas.js";

/**
 * One JSON-RPC batch element = one call: each element is authorized afresh, so a grant
 * revoked by an earlier element of the same POST cannot act in a later one.
 */
describe("JSON-RPC batches: every element is authorized afresh", () => {
  let stack: TestStack;
  let f: Fixtures;

  before(async () => {
    stack = await startStack({ gateway: true, provisioningLimitPerMinute: 1000 });
    f = fixtures(stack);
  });
  after(() => stack?.close());

  const budgetCall = (id: number, key: string) => ({
    jsonrpc: "2.0",
    id,
    method: "agent.budget.create",
    params: { purpose: "trip", display_name: "Batch budget", chain_allowlist: ["base"], idempotency_key: key },
  });
  const killCall = (id: number) => ({ jsonrpc: "2.0", id, method: "killSwitch.all", params: { reason: "batch test" } });
  const budgetsUnder = async (vaultId: string) => Number((await stack.core.db("budgets").where({ parent_vault_id: vaultId }).count({ n: "*" }))[0]!.n);

  it("control: with the same kind of grant, [agent.budget.create, killSwitch.all] creates the budget, then revokes", async () => {
    const user = await f.user();
    const owner = await f.grant(user, { stepUp: true });
    const res = await postJsonRpc(`${stack.url}/mcp/treasury`, [budgetCall(1, `b-${randomUUID()}`), killCall(2)], owner.accessToken);
    expect(res.json, res.text).to.be.an("array").with.length(2);
    const [budget, kill] = res.json as JsonRpcReply[];
    expect(budget!.id).to.equal(1);
    expect(budget!.error, res.text).to.equal(undefined);
    expect(budget!.result?.status).to.equal("active");
    expect(kill!.result?.revoked).to.be.at.least(1);
    expect(await budgetsUnder(user.vaultId)).to.equal(1);
  });

  it("[killSwitch.all, agent.budget.create]: the second element is refused (-32001 invalid_token) and creates nothing", async () => {
    const user = await f.user();
    const owner = await f.grant(user, { stepUp: true });
    const res = await postJsonRpc(`${stack.url}/mcp/treasury`, [killCall(1), budgetCall(2, `b-${randomUUID()}`)], owner.accessToken);
    expect(res.json, res.text).to.be.an("array").with.length(2);
    const [kill, budget] = res.json as JsonRpcReply[];
    expect(kill!.id).to.equal(1);
    expect(kill!.result?.revoked, res.text).to.be.at.least(1);
    expect(budget!.id).to.equal(2);
    expect(budget!.result, res.text).to.equal(undefined);
    expect(budget!.error?.code).to.equal(-32001);
    expect(budget!.error?.data?.reason_id).to.equal("invalid_token");
    expect(await budgetsUnder(user.vaultId)).to.equal(0);
    expect(await stack.core.db("vaults").where({ parent_vault_id: user.vaultId }).first()).to.equal(undefined);
  });

  it("a batch after the revocation is refused element by element", async () => {
    const user = await f.user();
    const owner = await f.grant(user, { stepUp: true });
    await postJsonRpc(`${stack.url}/mcp/treasury`, killCall(1), owner.accessToken);
    const res = await postJsonRpc(`${stack.url}/mcp/treasury`, [budgetCall(1, `b-${randomUUID()}`), killCall(2)], owner.accessToken);
    expect(res.status).to.equal(401);
    for (const r of res.json as JsonRpcReply[]) {
      expect(r.error?.code, res.text).to.equal(-32001);
      expect(r.error?.data?.reason_id).to.equal("invalid_token");
    }
    expect(await budgetsUnder(user.vaultId)).to.equal(0);
  });

  it("a batch whose refresh took effect answers 200 beside a refused bearer, so the rotated tokens are not lost to a 401", async () => {
    const user = await f.user();
    const client = await f.oauthClient("accounts:read");
    const grant = await f.clientGrant(user, client);
    const refresh = {
      jsonrpc: "2.0",
      id: 1,
      method: "agent.grant.refresh",
      params: { refresh_token: grant.refreshToken, client_id: client.clientId, client_secret: client.clientSecret },
    };
    const res = await postJsonRpc(`${stack.url}/mcp/treasury`, [refresh, { jsonrpc: "2.0", id: 2, method: "ping" }], "not-a-token");
    expect(res.status, res.text).to.equal(200);
    const [refreshed, ping] = res.json as JsonRpcReply[];
    expect(refreshed!.result?.refresh_token, res.text).to.be.a("string").and.not.equal(grant.refreshToken);
    expect(ping!.error?.code).to.equal(-32001);
    expect(ping!.error?.data?.reason_id).to.equal("invalid_token");
    // Nothing took effect: the refused bearer is answered 401 with its challenge.
    const refused = await postJsonRpc(`${stack.url}/mcp/treasury`, [{ jsonrpc: "2.0", id: 3, method: "ping" }], "not-a-token");
    expect(refused.status).to.equal(401);
    expect(refused.headers.get("www-authenticate")).to.match(/^Bearer /);
  });
});
