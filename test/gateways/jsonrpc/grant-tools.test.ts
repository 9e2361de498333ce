import { expect } from "chai";
import { startMcpStack, postRpc, TEST_MCP_URL, type McpStack } from "../../support/mcp.js";
import { ALL_AGENT_SCOPES, createOwner } from "../../support/budgets.js";

/** The 401 challenge of an endpoint: its own metadata and scopes; error="invalid_token" when a token was presented. */
const challenge = (path: string) => {
  const scopes: Record<string, string> = {
    "/mcp/read": "accounts:read audit:stream",
    "/mcp/write": "payments:initiate payments:simulate",
    "/mcp/treasury": "agent:budget:create",
  };
  return `Bearer resource_metadata="${TEST_MCP_URL}/.well-known/oauth-protected-resource${path}", scope="${scopes[path]}", error="invalid_token"`;
};

/**
 * Agent tools with real grant tokens from GrantsService: expiry, supersession,
 * revocation, agent.grant.issue / refresh and killSwitch.all.
 */
describe("agent tools with real grant tokens", () => {
  let stack: McpStack;
  before(async () => {
    stack = await startMcpStack();
    const owner = await createOwner(stack);
    // IssueGrant must work: these tests never skip on a missing RPC.
    await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] });
  });
  after(() => stack?.close());

  async function grant(scopes = ALL_AGENT_SCOPES, stepUp = false) {
    const owner = await createOwner(stack);
    const res = await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes, stepUp });
    return { owner, token: res.token! };
  }
  const call = (path: string, token: string, method: string, params: unknown = {}) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
  const expect401 = (res: Awaited<ReturnType<typeof call>>) => {
    expect(res.status).to.equal(401);
    expect(res.headers.get("www-authenticate")).to.equal(challenge(new URL(res.url).pathname));
    expect([res.json!.error.code, res.json!.error.data.reason_id]).to.deep.equal([-32001, "invalid_token"]);
  };

  it("a real token reaches the tools; after 3600 s it is refused with 401", async () => {
    const { owner, token } = await grant();
    const ok = await call("/mcp/read", token.accessToken, "accounts.balance");
    expect(ok.json!.result.vault_id).to.equal(owner.vaultId);
    stack.clock.advance(3_631_000);
    expect401(await call("/mcp/read", token.accessToken, "accounts.balance"));
  });

  it("agent.grant.issue supersedes the calling grant and never widens scope", async () => {
    const { token } = await grant(["accounts:read", "payments:simulate"]);
    const wider = await call("/mcp/treasury", token.accessToken, "agent.grant.issue", { scope: "accounts:read payments:initiate" });
    expect(wider.json!.error.code).to.equal(-32602);
    const issued = await call("/mcp/treasury", token.accessToken, "agent.grant.issue", { scope: "accounts:read" });
    const next = issued.json!.result;
    expect(Object.keys(next).sort()).to.deep.equal(["access_token", "expires_in", "jti", "refresh_token", "scope", "token_type"]);
    expect([next.token_type, next.expires_in, next.scope]).to.deep.equal(["Bearer", 3600, "accounts:read"]);
    expect401(await call("/mcp/read", token.accessToken, "accounts.balance"));
    expect((await call("/mcp/read", next.access_token, "accounts.balance")).json!.result).to.not.equal(undefined);
  });

  it("agent.grant.refresh needs no bearer; a bad refresh token is -32001", async () => {
    const bad = await postRpc(`${stack.url}/mcp/treasury`, {
      jsonrpc: "2.0",
      id: 1,
      method: "agent.grant.refresh",
      params: { refresh_token: "nope", client_id: "nope", client_secret: "nope" },
    });
    expect(bad.status).to.equal(200);
    expect(bad.json!.error.code).to.equal(-32001);
  });

  it("killSwitch.all revokes every grant of the user; tool calls are then refused", async () => {
    const { owner, token } = await grant();
    const other = await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] });
    const res = await call("/mcp/treasury", token.accessToken, "killSwitch.all", { reason: "test" });
    expect(res.json!.result.revoked).to.be.greaterThanOrEqual(2);
    expect401(await call("/mcp/read", token.accessToken, "accounts.balance"));
    expect401(await call("/mcp/read", other.token!.accessToken, "accounts.balance"));
  });

  it("killSwitch.all audits at most 200 characters of its reason and never half of an emoji", async () => {
    const { owner, token } = await grant();
    const reason = `${"a".repeat(199)}\u{1F600} and the rest`;
    expect((await call("/mcp/treasury", token.accessToken, "killSwitch.all", { reason })).json!.result.revoked).to.equal(1);
    const { records } = await stack.admin.audit.listRecords({ action: "killSwitch.all", limit: 500 });
    expect(records.filter((r) => r.subject === owner.userId).map((r) => r.reason)).to.deep.equal([`${"a".repeat(199)}\u{1F600}`]);
  });

  it("concurrent payments.simulate calls on several grants each read their own grant and vault; a revocation refuses the next burst", async () => {
    // A vault with a policy (a budget's child vault) and a root vault without one.
    const { owner, token: parent } = await grant(ALL_AGENT_SCOPES, true);
    const budget = await call("/mcp/treasury", parent.accessToken, "agent.budget.create", {
      purpose: "trip",
      display_name: "Concurrent",
      amount_cap_cents_per_tx: 500,
      chain_allowlist: ["base"],
      idempotency_key: "concurrent-sim-0001",
    });
    const child = budget.json!.result as { vault_id: string };
    await stack.admin.budgets.fundVault({ vaultId: child.vault_id, amountCents: 10_000n });
    const withPolicy = (await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: child.vault_id, scopes: ALL_AGENT_SCOPES })).token!.accessToken;
    const rootOnly = (await grant()).token.accessToken;
    const simulate = (token: string, amount: number) =>
      call("/mcp/write", token, "payments.simulate", {
        counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
        amount_cents: amount,
        currency: "USD",
        idempotency_key: "concurrent-sim-key",
      });
    const burst = () =>
      Promise.all(Array.from({ length: 24 }, (_, i) => (i % 3 === 0 ? simulate(rootOnly, 100) : simulate(withPolicy, i % 3 === 1 ? 100 : 501))));
    const broken = (reason_id: string, message: string) => [{ reason_id, message }];
    const expected = (i: number) =>
      i % 3 === 0
        ? { outcome: "denied", rule: "policy_inactive", broken_rules: broken("policy_inactive", "the vault's spending policy is not active") }
        : i % 3 === 1
          ? { outcome: "accepted", rule: null, broken_rules: [] }
          : { outcome: "denied", rule: "per_tx_cap", broken_rules: broken("per_tx_cap", "the amount is over the per-transaction cap") };

    for (const [i, res] of (await burst()).entries()) expect(res.json!.result, `call ${i}`).to.deep.equal(expected(i));
    expect((await call("/mcp/treasury", rootOnly, "killSwitch.all", {})).json!.result.revoked).to.equal(1);
    for (const [i, res] of (await burst()).entries()) {
      if (i % 3 === 0) expect401(res);
      else expect(res.json!.result, `call ${i}`).to.deep.equal(expected(i));
    }
  });

  it("agent.budget.create with a step-up grant is active", async () => {
    const { token } = await grant(ALL_AGENT_SCOPES, true);
    const res = await call("/mcp/treasury", token.accessToken, "agent.budget.create", {
      purpose: "payroll",
      display_name: "Payroll",
      chain_allowlist: ["eth"],
      idempotency_key: "real-grant-0001",
    });
    expect([res.json!.result.status, res.json!.result.policy_version]).to.deep.equal(["active", 1]);
  });
});
