import { randomUUID } from "node:crypto";
import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import { expect } from "chai";
import { startMcpStack, postRpc, type JsonRpcReply, type McpStack } from "../../support/mcp.js";
import { ALL_AGENT_SCOPES, grantFor } from "../../support/budgets.js";
import { balanceOf, budgetUnderRoot, expectLedgerBalanced } from "../../support/budget-life.js";
import { expectJsonRpcError, expectToolError } from "../../support/refusals.js";
import { compileToolSchemas } from "../../../gateways/jsonrpc/schemas.js";
import { TOOLS } from "../../../gateways/jsonrpc/tools.js";

const validators = compileToolSchemas(TOOLS);

/** agent.budget.fund and agent.budget.revoke on /mcp/treasury, over HTTP. */
describe("agent.budget.fund and agent.budget.revoke over JSON-RPC", () => {
  let stack: McpStack;
  before(async () => {
    stack = await startMcpStack();
  });
  after(() => stack.close());

  const key = () => `fund-${randomUUID()}`;
  const call = (path: string, token: string, method: string, params: unknown, id: number | string = 1) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id, method, params }, { authorization: `Bearer ${token}` });
  const tool = (token: string, name: string, args: unknown) => call("/mcp/treasury", token, "tools/call", { name, arguments: args });
  it("tools/list publishes both with their schemas, scope and annotations (fund idempotent; revoke destructive and idempotent)", async () => {
    const { parentToken } = await budgetUnderRoot(stack);
    const tools = (await call("/mcp/treasury", parentToken, "tools/list", {})).json!.result.tools as Tool[];
    const fund = tools.find((t) => t.name === "agent.budget.fund")!;
    const revoke = tools.find((t) => t.name === "agent.budget.revoke")!;
    expect(fund.annotations).to.deep.equal({
      title: "Fund Agent Budget",
      readOnlyHint: false,
      destructiveHint: false,
      idempotentHint: true,
      openWorldHint: false,
    });
    expect(revoke.annotations).to.deep.equal({
      title: "Close Agent Budget",
      readOnlyHint: false,
      destructiveHint: true,
      idempotentHint: true,
      openWorldHint: false,
    });
    for (const t of [fund, revoke]) {
      expect(t._meta).to.deep.equal({ requiresHumanApproval: false, scope: "agent:budget:create", scopes: ["agent:budget:create"], category: "treasury" });
      expect(t.inputSchema.additionalProperties).to.equal(false);
      // The result alone: a refusal (isError) carries no structuredContent to validate.
      expect(t.outputSchema).to.not.have.property("anyOf");
      expect(t.outputSchema?.additionalProperties).to.equal(false);
    }
    expect(fund.inputSchema.required).to.deep.equal(["vault_id", "amount_cents", "idempotency_key"]);
    expect(revoke.inputSchema.required).to.deep.equal(["vault_id"]);
    // The write endpoint does not serve them.
    const wrong = await call("/mcp/write", parentToken, "agent.budget.fund", { vault_id: randomUUID(), amount_cents: 1, idempotency_key: key() });
    expectJsonRpcError(wrong, -32601, "wrong_endpoint");
  });

  it("agent.budget.fund: the direct result matches its outputSchema, tools/call wraps it; replay, conflict, funds and schema refusals", async () => {
    const { owner, parentToken, child } = await budgetUnderRoot(stack, { parentCents: 10_000n });
    const args = { vault_id: child.vaultId, amount_cents: 4_000, idempotency_key: key() };
    const direct = await call("/mcp/treasury", parentToken, "agent.budget.fund", args);
    const r = direct.json!.result;
    expect(r, direct.text).to.deep.include({
      vault_id: child.vaultId,
      parent_vault_id: owner.vaultId,
      amount_cents: 4_000,
      currency: "USD",
      balance_cents: 4_000,
      replayed: false,
    });
    expect(Object.keys(r).sort()).to.deep.equal(["amount_cents", "balance_cents", "currency", "parent_vault_id", "replayed", "transfer_id", "vault_id"]);
    expect(validators.get("agent.budget.fund")!.output(r)).to.equal(true);
    const replay = await tool(parentToken, "agent.budget.fund", args);
    expect(replay.json!.result.isError).to.equal(false);
    expect(replay.json!.result.structuredContent).to.deep.equal({ ...r, replayed: true });
    expect(await balanceOf(stack, owner.vaultId)).to.equal(6_000);

    // Direct calls answer JSON-RPC errors; through tools/call the same refusals are isError results.
    const conflict = { ...args, amount_cents: 4_001 };
    expectJsonRpcError(await call("/mcp/treasury", parentToken, "agent.budget.fund", conflict), -32602, "idempotency_conflict");
    expectToolError((await tool(parentToken, "agent.budget.fund", conflict)).json!.result, -32602, "idempotency_conflict");
    const over = { vault_id: child.vaultId, amount_cents: 6_001, idempotency_key: key() };
    const funds = await call("/mcp/treasury", parentToken, "agent.budget.fund", over);
    expectJsonRpcError(funds, -32003, "insufficient_funds");
    expect(funds.json!.error.message).to.equal("the parent vault's balance is below the amount");
    expect(JSON.stringify(funds.json)).to.not.include("6000"); // no balance in a refusal
    expectToolError((await tool(parentToken, "agent.budget.fund", over)).json!.result, -32003, "insufficient_funds");
    for (const bad of [
      { ...over, amount_cents: 0 },
      { ...over, amount_cents: 1.5 },
      { ...over, vault_id: "not-a-vault" },
      { ...over, idempotency_key: "short" },
      { vault_id: child.vaultId, amount_cents: 1 },
      { ...over, amount_cents: 1, extra: true },
    ]) {
      expectJsonRpcError(await call("/mcp/treasury", parentToken, "agent.budget.fund", bad), -32602, "invalid_params");
    }
    expect(await balanceOf(stack, owner.vaultId)).to.equal(6_000);
    await expectLedgerBalanced(stack);
  });

  it("hostile callers: another user's budget (not_found), the budget's own grant (grant_required), a grant without agent:budget:create, no bearer", async () => {
    const { owner, child } = await budgetUnderRoot(stack, { parentCents: 10_000n });
    const stranger = await budgetUnderRoot(stack, { parentCents: 10_000n });
    const args = { vault_id: child.vaultId, amount_cents: 100, idempotency_key: key() };
    expectJsonRpcError(await call("/mcp/treasury", stranger.parentToken, "agent.budget.fund", args), -32602, "not_found");
    expectToolError((await tool(stranger.parentToken, "agent.budget.revoke", { vault_id: child.vaultId })).json!.result, -32602, "not_found");
    const own = await grantFor(stack, child, { scopes: ALL_AGENT_SCOPES });
    expectJsonRpcError(await call("/mcp/treasury", own, "agent.budget.fund", args), -32002, "grant_required");
    expectToolError((await tool(own, "agent.budget.revoke", { vault_id: child.vaultId })).json!.result, -32002, "grant_required");
    // Who is calling stays a JSON-RPC error inside tools/call: the owner's own grant without the scope.
    const narrow = await grantFor(stack, owner, { scopes: ["accounts:read"] });
    expectJsonRpcError(await tool(narrow, "agent.budget.fund", args), -32002, "insufficient_scope");
    const anonymous = await postRpc(`${stack.url}/mcp/treasury`, { jsonrpc: "2.0", id: 1, method: "agent.budget.revoke", params: { vault_id: child.vaultId } });
    expect(anonymous.status).to.equal(401);
    expectJsonRpcError(anonymous, -32001, "invalid_token");
    expect(await balanceOf(stack, child.vaultId)).to.equal(0);
    expect((await stack.core.db("budgets").where({ vault_id: child.vaultId }).first()).status).to.equal("active");
  });

  it("agent.budget.revoke: closes, sweeps and revokes; a replay says already_closed; the budget's agent is cut off and nothing more is funded", async () => {
    const { owner, parentToken, child } = await budgetUnderRoot(stack, { parentCents: 10_000n });
    await call("/mcp/treasury", parentToken, "agent.budget.fund", { vault_id: child.vaultId, amount_cents: 3_000, idempotency_key: key() });
    const childToken = await grantFor(stack, child);
    const pay = (token: string) =>
      call("/mcp/write", token, "payments.initiate", {
        counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
        amount_cents: 500,
        currency: "USD",
        idempotency_key: key(),
      });
    expect((await pay(childToken)).json!.result.kind).to.equal("accepted");

    const direct = await call("/mcp/treasury", parentToken, "agent.budget.revoke", { vault_id: child.vaultId });
    const r = direct.json!.result;
    expect(r, direct.text).to.deep.include({
      vault_id: child.vaultId,
      parent_vault_id: owner.vaultId,
      status: "closed",
      swept_cents: 2_500,
      currency: "USD",
      revoked_grants: 1,
      already_closed: false,
    });
    expect(r.transfer_id).to.match(/^[0-9a-f-]{36}$/);
    expect(r.closed_at).to.match(/Z$/);
    expect(validators.get("agent.budget.revoke")!.output(r)).to.equal(true);
    expect([await balanceOf(stack, owner.vaultId), await balanceOf(stack, child.vaultId)]).to.deep.equal([9_500, 0]);
    await expectLedgerBalanced(stack);

    const again = await tool(parentToken, "agent.budget.revoke", { vault_id: child.vaultId, keep_funds: false });
    expect(again.json!.result.structuredContent).to.deep.equal({ ...r, swept_cents: 0, transfer_id: null, revoked_grants: 0, already_closed: true });
    expect(validators.get("agent.budget.revoke")!.output(again.json!.result.structuredContent)).to.equal(true);
    const refused = await pay(childToken);
    expect(refused.status).to.equal(401);
    expectJsonRpcError(refused, -32001, "invalid_token");
    const later = await grantFor(stack, child);
    const frozen = await pay(later);
    expect(expectJsonRpcError(frozen, -32002, "policy_denied").data?.limit).to.equal("policy_inactive");
    expectToolError(
      (await tool(parentToken, "agent.budget.fund", { vault_id: child.vaultId, amount_cents: 1, idempotency_key: key() })).json!.result,
      -32002,
      "access_denied",
    );
    await expectLedgerBalanced(stack);
  });

  it("a batch is authorized element by element: fund then revoke both act; after a kill switch a fund moves nothing", async () => {
    const { owner, parentToken, child } = await budgetUnderRoot(stack, { parentCents: 10_000n });
    const fundCall = (id: number) => ({
      jsonrpc: "2.0",
      id,
      method: "agent.budget.fund",
      params: { vault_id: child.vaultId, amount_cents: 1_000, idempotency_key: key() },
    });
    const both = await postRpc(
      `${stack.url}/mcp/treasury`,
      [fundCall(1), { jsonrpc: "2.0", id: 2, method: "agent.budget.revoke", params: { vault_id: child.vaultId, keep_funds: true } }],
      {
        authorization: `Bearer ${parentToken}`,
      },
    );
    const [funded, closed] = both.json as unknown as JsonRpcReply[];
    expect([funded!.result?.balance_cents, closed!.result?.status, closed!.result?.swept_cents], both.text).to.deep.equal([1_000, "closed", 0]);
    expect(await balanceOf(stack, child.vaultId)).to.equal(1_000);

    const other = await budgetUnderRoot(stack, { parentCents: 10_000n });
    const killed = await postRpc(
      `${stack.url}/mcp/treasury`,
      [
        { jsonrpc: "2.0", id: 1, method: "killSwitch.all", params: {} },
        { jsonrpc: "2.0", id: 2, method: "agent.budget.fund", params: { vault_id: other.child.vaultId, amount_cents: 1_000, idempotency_key: key() } },
      ],
      { authorization: `Bearer ${other.parentToken}` },
    );
    const [kill, refused] = killed.json as unknown as JsonRpcReply[];
    expect(kill!.result?.revoked, killed.text).to.be.at.least(1);
    expect([refused!.error?.code, refused!.error?.data?.reason_id]).to.deep.equal([-32001, "invalid_token"]);
    expect(await balanceOf(stack, other.owner.vaultId)).to.equal(10_000);
    expect(await balanceOf(stack, owner.vaultId)).to.equal(9_000);
    await expectLedgerBalanced(stack);
  });
});
