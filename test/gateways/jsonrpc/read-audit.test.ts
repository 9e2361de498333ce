import { requirePostgres } from "../../support/db.js";
import { expect } from "chai";
import { startMcpStack, postRpc, type McpStack } from "../../support/mcp.js";
import { createOwner, grantFor, type TestOwner } from "../../support/budgets.js";

/**
 * Every agent read that returns account data writes one audit row before its data
 * leaves, and is refused (-32603 audit_unavailable, no data) when the row cannot be
 * written; /readyz names the failing audit check. Over JSON-RPC/HTTP.
 */
describe("agent reads are audited and withheld without their audit row (JSON-RPC)", () => {
  let stack: McpStack;
  let auditDown = false;
  let seq = 0;
  let child: TestOwner;
  let token: string;

  before(async () => {
    stack = await startMcpStack({ auditFaults: { appendFault: () => (auditDown ? new Error("injected audit store fault") : undefined) } });
    const parent = await createOwner(stack);
    const created = await call("/mcp/treasury", await grantFor(stack, parent), "agent.budget.create", {
      purpose: "market-research",
      display_name: "Reader",
      chain_allowlist: ["base"],
      idempotency_key: `reads-${Date.now()}-abcdef`,
    });
    await stack.admin.budgets.fundVault({ vaultId: created.json!.result.vault_id, amountCents: 10_000n });
    child = { userId: parent.userId, vaultId: created.json!.result.vault_id, agentPrincipalId: created.json!.result.agent_principal_id };
    token = await grantFor(stack, child);
  });
  after(() => stack.close());
  afterEach(() => {
    auditDown = false;
  });

  function call(path: string, bearer: string, method: string, params: unknown) {
    return postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: ++seq, method, params }, { authorization: `Bearer ${bearer}` });
  }
  const simulateArgs = () => ({
    counterparty: { address: "0x1111111111111111111111111111111111111111", chain: "base", token: "USDC" },
    amount_cents: 100,
    currency: "USD",
    idempotency_key: `sim-${++seq}-abcdefgh`,
  });
  const reads: { name: string; path: string; params: () => unknown; actor: () => string }[] = [
    { name: "accounts.balance", path: "/mcp/read", params: () => ({}), actor: () => `agent:${child.agentPrincipalId}` },
    { name: "audit.list", path: "/mcp/read", params: () => ({ limit: 5 }), actor: () => `agent:${child.agentPrincipalId}:audit-reader` },
    { name: "payments.simulate", path: "/mcp/write", params: simulateArgs, actor: () => `agent:${child.agentPrincipalId}` },
  ];
  const rowsOf = (requestId: string) => stack.core.db("audit_records").where({ request_id: requestId });

  for (const read of reads) {
    it(`${read.name} writes one success audit row under the agent before answering`, async () => {
      const res = await call(read.path, token, read.name, read.params());
      expect(res.json!.result, res.text).to.be.an("object");
      const rows = await rowsOf(res.headers.get("x-request-id")!);
      expect(rows.map((r) => [r.actor, r.action, r.outcome])).to.deep.equal([[read.actor(), read.name, "success"]]);
    });

    it(`${read.name} is refused with audit_unavailable and returns no data when its audit row cannot be written`, async () => {
      auditDown = true;
      const res = await call(read.path, token, read.name, read.params());
      expect(res.json!.result).to.equal(undefined);
      expect(res.json!.error.code).to.equal(-32603);
      expect(res.json!.error.data.reason_id).to.equal("audit_unavailable");
      expect(res.text).to.not.match(/balance_cents|decision|records/);
      expect(await rowsOf(res.headers.get("x-request-id")!)).to.deep.equal([]);
    });
  }

  it("a refused simulate (revoked grant, inactive user, wrong currency) writes no success row", async () => {
    const revoked = await grantFor(stack, child);
    await stack.core
      .db("grants")
      .where({ id: JSON.parse(Buffer.from(revoked.split(".")[1]!, "base64url").toString()).jti })
      .update({ state: "revoked" });
    const refused = await call("/mcp/write", revoked, "payments.simulate", simulateArgs());
    expect(refused.json!.error.code).to.equal(-32001);
    const other = await createOwner(stack);
    const otherToken = await grantFor(stack, other);
    await stack.core.db("users").where({ id: other.userId }).update({ status: "inactive" });
    const inactive = await call("/mcp/write", otherToken, "payments.simulate", simulateArgs());
    expect(inactive.json!.error.code).to.equal(-32001);
    const wrongCurrency = await call("/mcp/write", token, "payments.simulate", { ...simulateArgs(), currency: "EUR" });
    expect(wrongCurrency.json!.error.code).to.equal(-32602);
    for (const r of [refused, inactive, wrongCurrency]) {
      expect((await rowsOf(r.headers.get("x-request-id")!)).filter((row) => row.outcome === "success")).to.deep.equal([]);
    }
  });

  it("concurrent simulates share statements and each writes exactly its own row (Postgres)", async function () {
    // PGlite serialises everything on one connection; batching is a Postgres concern.
    requirePostgres(this, "concurrent reads need several connections");
    const answers = await Promise.all(Array.from({ length: 40 }, () => call("/mcp/write", token, "payments.simulate", simulateArgs())));
    for (const res of answers) {
      expect(res.json!.result.outcome, res.text).to.be.a("string");
      const rows = await rowsOf(res.headers.get("x-request-id")!);
      expect(rows.map((r) => r.action)).to.deep.equal(["payments.simulate"]);
    }
  });

  it("/readyz is ready with a working audit store and names the audit check when it fails", async () => {
    const ok = await fetch(`${stack.url}/readyz`);
    expect([ok.status, await ok.json()]).to.deep.equal([200, { status: "ready" }]);
    const before = Number((await stack.core.db("audit_records").count({ n: "*" }))[0]!.n);
    auditDown = true;
    const failing = await fetch(`${stack.url}/readyz`);
    expect([failing.status, await failing.json()]).to.deep.equal([503, { status: "not_ready", failing: ["audit"] }]);
    auditDown = false;
    expect((await fetch(`${stack.url}/readyz`)).status).to.equal(200);
    // The probe leaves no record.
    expect(Number((await stack.core.db("audit_records").count({ n: "*" }))[0]!.n)).to.equal(before);
  });
});
