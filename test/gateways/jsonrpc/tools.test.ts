import { expect } from "chai";
import { startMcpStack, postRpc, type McpStack } from "../../support/mcp.js";
import { createOwner, grantFor, type TestOwner } from "../../support/budgets.js";
import { compileToolSchemas } from "../../../gateways/jsonrpc/schemas.js";
import { TOOLS } from "../../../gateways/jsonrpc/tools.js";
import type { StepName } from "../../../core/budgets/records.js";

const APP_URL = "http://app.vaultgate.test";
const validators = compileToolSchemas(TOOLS);

describe("agent tools over JSON-RPC (every JSON-RPC error code from a real case)", () => {
  let stack: McpStack;
  let failing: StepName | undefined;
  let hold: ((name: StepName) => Promise<void>) | undefined;
  let seq = 0;

  before(async () => {
    stack = await startMcpStack({
      appUrl: APP_URL,
      budgetFaults: {
        step: (name, phase) => (phase === "run" && name === failing ? new Error("injected") : undefined),
        beforeStep: (name) => hold?.(name) ?? Promise.resolve(),
      },
    });
  });
  after(() => stack.close());
  beforeEach(() => {
    failing = undefined;
    hold = undefined;
  });

  const key = () => `key-${Date.now().toString(36)}-${++seq}-abcdef`;
  const budgetArgs = (o: Record<string, unknown> = {}) => ({
    purpose: "market-research",
    display_name: "Research agent",
    amount_cap_cents_per_tx: 10_000,
    amount_cap_cents_per_day: 20_000,
    amount_cap_cents_lifetime: 50_000,
    step_up_amount_cents: 5_000,
    chain_allowlist: ["base"],
    time_window_end: "2099-02-28T23:59Z",
    idempotency_key: key(),
    ...o,
  });
  const call = (path: string, token: string, method: string, params: unknown, id: number | string = 1) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id, method, params }, { authorization: `Bearer ${token}` });
  const tool = (path: string, token: string, name: string, args: unknown) => call(path, token, "tools/call", { name, arguments: args });

  async function owner(scopes?: string[], stepUp = false): Promise<{ o: TestOwner; token: string }> {
    const o = await createOwner(stack);
    return { o, token: await grantFor(stack, o, { scopes, stepUp }) };
  }

  it("agent.budget.create (direct method) answers exactly the budget result; tools/call wraps the same in structuredContent", async () => {
    const { token } = await owner(undefined, true);
    const args = budgetArgs();
    const direct = await call("/mcp/treasury", token, "agent.budget.create", args);
    expect(direct.status).to.equal(200);
    const r = direct.json!.result;
    expect(Object.keys(r).sort()).to.deep.equal(["agent_principal_id", "created_at", "policy_version", "status", "vault_id"]);
    expect([r.status, r.policy_version]).to.deep.equal(["active", 1]);
    expect(r.created_at).to.match(/Z$/);
    expect(validators.get("agent.budget.create")!.output(r)).to.equal(true);

    const viaCall = await tool("/mcp/treasury", token, "agent.budget.create", args);
    expect(viaCall.json!.result.structuredContent).to.deep.equal(r);
    expect(JSON.parse(viaCall.json!.result.content[0].text)).to.deep.equal(r);
    expect(viaCall.json!.result.isError).to.equal(false);

    const draft = await call("/mcp/treasury", (await owner()).token, "agent.budget.create", budgetArgs());
    expect([draft.json!.result.status, draft.json!.result.policy_version]).to.deep.equal(["draft", 0]);
  });

  it("-32602: schema violations (including date-time), a past time_window_end, and idempotency_conflict", async () => {
    const { token } = await owner();
    const bad: Record<string, unknown>[] = [
      { purpose: "holiday" },
      { display_name: "" },
      { chain_allowlist: [] },
      { chain_allowlist: ["doge"] },
      { amount_cap_cents_per_tx: -1 },
      { amount_cap_cents_per_tx: 9007199254740992 },
      { amount_cap_cents_per_tx: 1.5 },
      { idempotency_key: "short" },
      { time_window_end: "2027-02-29T10:00Z" },
      { time_window_end: "2099-01-01T10:00:00+00:00" },
      { unexpected: true },
    ];
    for (const o of bad) {
      const res = await call("/mcp/treasury", token, "agent.budget.create", budgetArgs(o));
      expect(res.json!.error?.code, JSON.stringify(o)).to.equal(-32602);
      expect(res.json!.error.data.reason_id).to.equal("invalid_params");
    }
    const missing = await call("/mcp/treasury", token, "agent.budget.create", { purpose: "ap" });
    expect(missing.json!.error.code).to.equal(-32602);
    const past = await call("/mcp/treasury", token, "agent.budget.create", budgetArgs({ time_window_end: "2001-01-01T00:00Z" }));
    expect([past.json!.error.code, past.json!.error.data.reason_id]).to.deep.equal([-32602, "invalid_params"]);

    const args = budgetArgs({ time_window_end: "2096-02-29T12:00:00.5Z" });
    const first = await call("/mcp/treasury", token, "agent.budget.create", args);
    const replay = await call("/mcp/treasury", token, "agent.budget.create", args);
    expect(replay.json!.result).to.deep.equal(first.json!.result);
    const conflict = await call("/mcp/treasury", token, "agent.budget.create", { ...args, display_name: "Other" });
    expect([conflict.json!.error.code, conflict.json!.error.data.reason_id]).to.deep.equal([-32602, "idempotency_conflict"]);
  });

  it("time_window_end takes a fraction of seconds of any length, read to the millisecond", async () => {
    const { token } = await owner();
    const args = budgetArgs({ time_window_end: "2099-02-28T23:59:59.1234567891234Z" });
    const first = await call("/mcp/treasury", token, "agent.budget.create", args);
    expect(first.json!.result.status).to.equal("draft");
    const replay = await call("/mcp/treasury", token, "agent.budget.create", { ...args, time_window_end: "2099-02-28T23:59:59.123Z" });
    expect(replay.json!.result).to.deep.equal(first.json!.result);
  });

  it("a finished budget's replay answers its ids after its time window has ended", async () => {
    const { token } = await owner(undefined, true);
    const end = new Date(stack.clock().getTime() + 60_000);
    const args = budgetArgs({ time_window_end: `${end.toISOString().slice(0, 19)}Z` });
    const first = await call("/mcp/treasury", token, "agent.budget.create", args);
    expect(first.json!.result.status).to.equal("active");
    stack.clock.advance(120_000);
    try {
      const replay = await call("/mcp/treasury", token, "agent.budget.create", args);
      expect(replay.json!.result).to.deep.equal(first.json!.result);
      // A new key with that window is a new budget, and its window has ended.
      const fresh = await call("/mcp/treasury", token, "agent.budget.create", { ...args, idempotency_key: key() });
      expect(fresh.json!.error.code).to.equal(-32602);
      expect(fresh.json!.error.message).to.include("time_window_end must be in the future");
    } finally {
      stack.clock.advance(-120_000);
    }
  });

  it("-32002: the grant lacks agent:budget:create (a superset of scopes is accepted)", async () => {
    const { token } = await owner(["payments:initiate"]);
    const res = await call("/mcp/treasury", token, "agent.budget.create", budgetArgs());
    expect(res.status).to.equal(403);
    expect(res.headers.get("www-authenticate")).to.match(/^Bearer resource_metadata="[^"]+\/mcp\/treasury", scope="[^"]+", error="insufficient_scope"$/);
    expect([res.json!.error.code, res.json!.error.data.reason_id]).to.deep.equal([-32002, "insufficient_scope"]);
    const superset = await owner(["agent:budget:create", "payments:initiate", "accounts:read"]);
    expect((await call("/mcp/treasury", superset.token, "agent.budget.create", budgetArgs())).json!.result.status).to.equal("draft");
  });

  it("-32004: provisioning starts are rate limited per vault, with data.retry_after_seconds", async () => {
    const { token } = await owner();
    for (let i = 0; i < 10; i++) expect((await call("/mcp/treasury", token, "agent.budget.create", budgetArgs())).json!.result).to.not.equal(undefined);
    const res = await call("/mcp/treasury", token, "agent.budget.create", budgetArgs());
    expect([res.json!.error.code, res.json!.error.data.reason_id, res.json!.error.data.retry_after_seconds]).to.deep.equal([-32004, "rate_limited", 60]);
  });

  it("-32005: the parent vault is in another provisioning sequence", async () => {
    const { token } = await owner();
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let reached!: () => void;
    const atPolicy = new Promise<void>((r) => (reached = r));
    hold = (name) => {
      if (name !== "policy") return Promise.resolve();
      reached();
      return held;
    };
    const first = call("/mcp/treasury", token, "agent.budget.create", budgetArgs());
    await atPolicy;
    hold = undefined;
    const res = await call("/mcp/treasury", token, "agent.budget.create", budgetArgs());
    expect([res.json!.error.code, res.json!.error.data.reason_id]).to.deep.equal([-32005, "vault_contention"]);
    release();
    expect((await first).json!.result.status).to.equal("draft");
  });

  it("-32603: a failed provisioning step shows each step and the cleanup; a retry with the same key completes", async () => {
    const { token } = await owner();
    const args = budgetArgs();
    failing = "agent_principal";
    const res = await call("/mcp/treasury", token, "agent.budget.create", args);
    expect(res.json!.error).to.deep.equal({
      code: -32603,
      message: "Internal error",
      data: {
        reason_id: "provisioning_failed",
        provisioning: [
          { step: "vault", state: "compensated" },
          { step: "agent_principal", state: "failed" },
          { step: "policy", state: "pending" },
        ],
        cleanup: "complete",
        remaining: [],
        request_id: res.headers.get("x-request-id"),
      },
    });
    expect(res.text).to.not.include("injected");
    failing = undefined;
    expect((await call("/mcp/treasury", token, "agent.budget.create", args)).json!.result.status).to.equal("draft");
  });

  describe("payments on /write and /mcp/write", () => {
    let child: TestOwner;
    let token: string;
    before(async () => {
      const parent = await owner(undefined, true);
      const created = (await call("/mcp/treasury", parent.token, "agent.budget.create", budgetArgs({ time_window_end: undefined }))).json!.result;
      await stack.admin.budgets.fundVault({ vaultId: created.vault_id, amountCents: 30_000n });
      child = { userId: parent.o.userId, vaultId: created.vault_id, agentPrincipalId: created.agent_principal_id };
      token = await grantFor(stack, child);
    });
    const pay = (o: Record<string, unknown> = {}) => ({
      counterparty: { address: "0x1111111111111111111111111111111111111111", chain: "base", token: "USDC" },
      amount_cents: 1_000,
      currency: "USD",
      idempotency_key: key(),
      ...o,
    });

    it("payments.initiate via tools/call on /write: accepted, then idempotent", async () => {
      const args = pay();
      const res = await tool("/write", token, "payments.initiate", args);
      const out = res.json!.result.structuredContent;
      expect(out.kind).to.equal("accepted");
      expect(out.status).to.equal("completed");
      expect(validators.get("payments.initiate")!.output(out)).to.equal(true);
      expect((await tool("/mcp/write", token, "payments.initiate", args)).json!.result.structuredContent).to.deep.equal(out);
      const balance = await call("/mcp/read", token, "accounts.balance", {});
      expect(balance.json!.result).to.deep.equal({ vault_id: child.vaultId, balance_cents: 29_000, currency: "USD" });
    });

    it("an amount JSON would round (4.9999999999999999 is read as 5) is refused, and nothing is paid", async () => {
      const before = (await call("/mcp/read", token, "accounts.balance", {})).json!.result.balance_cents;
      for (const amount of ["4.9999999999999999", "5.0000000000000001", "9007199254740993"]) {
        const args = JSON.stringify({ name: "payments.initiate", arguments: { ...pay(), amount_cents: "AMOUNT" } }).replace('"AMOUNT"', amount);
        const body = `{"jsonrpc":"2.0","id":41,"method":"tools/call","params":${args}}`;
        const res = await postRpc(`${stack.url}/write`, body, { authorization: `Bearer ${token}` });
        expect(res.json!.id, amount).to.equal(41);
        expect(res.json!.result.isError, amount).to.equal(true);
        expect(res.json!.result._meta.error.code, amount).to.equal(-32602);
        expect(res.json!.result._meta.error.data.errors, amount).to.deep.equal([
          { path: "/amount_cents", message: "cannot be carried exactly as a JSON number: send an integer within ±(2^53-1)" },
        ]);
      }
      // 5.0 is the integer 5, exactly: JSON Schema and the contract agree.
      const five = JSON.stringify({ name: "payments.initiate", arguments: { ...pay(), amount_cents: "AMOUNT" } }).replace('"AMOUNT"', "5.0");
      const paid = await postRpc(`${stack.url}/write`, `{"jsonrpc":"2.0","id":42,"method":"tools/call","params":${five}}`, {
        authorization: `Bearer ${token}`,
      });
      expect(paid.json!.result.structuredContent.kind).to.equal("accepted");
      expect((await call("/mcp/read", token, "accounts.balance", {})).json!.result.balance_cents).to.equal(before - 5);
    });

    it("a counterparty that is not printable ASCII is refused before anything is paid: no payee can be shown as another", async () => {
      const before = (await call("/mcp/read", token, "accounts.balance", {})).json!.result.balance_cents;
      const sol = "7EcDhSYGxXyscszYEp35KHN8vvw3svAuLKTzXwCFLtV";
      const cases: [string, Record<string, unknown>, RegExp][] = [
        ["bidi override", { address: `${sol}\u202e`, chain: "sol", token: "SOL" }, /counterparty\.address must be printable ASCII/],
        ["escape sequence", { address: `\u001b[2K${sol}`, chain: "sol", token: "SOL" }, /counterparty\.address must be printable ASCII/],
        ["look-alike letter", { address: sol.replace("E", "\u0415"), chain: "sol", token: "SOL" }, /counterparty\.address must be printable ASCII/],
        ["space", { address: `${sol.slice(0, 20)} ${sol.slice(20)}`, chain: "sol", token: "SOL" }, /counterparty\.address must be printable ASCII/],
        ["token", { address: sol, chain: "sol", token: "SO\u200bL" }, /counterparty\.token must be printable ASCII/],
      ];
      for (const [what, counterparty, message] of cases) {
        for (const name of ["payments.initiate", "payments.simulate"]) {
          const res = await tool("/mcp/write", token, name, pay({ counterparty }));
          expect(res.json!.result._meta?.error.code, `${name}: ${what}`).to.equal(-32602);
          expect(res.json!.result._meta.error.message, `${name}: ${what}`).to.match(message);
        }
      }
      expect((await call("/mcp/read", token, "accounts.balance", {})).json!.result.balance_cents).to.equal(before);
    });

    it("a numeric id JSON would change is refused by name, never answered under another id", async () => {
      const res = await postRpc(`${stack.url}/mcp/read`, `{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`, { authorization: `Bearer ${token}` });
      expect(res.json!.id).to.equal(null);
      expect(res.json!.error.code).to.equal(-32600);
      expect(res.json!.error.data.detail).to.include("id 9007199254740993 cannot be answered exactly");
      const exact = await postRpc(`${stack.url}/mcp/read`, `{"jsonrpc":"2.0","id":9007199254740991,"method":"ping"}`, { authorization: `Bearer ${token}` });
      expect(exact.text).to.include('"id":9007199254740991');
    });

    it("over the step-up amount: pending_step_up with a step_up_url at {app_url}", async () => {
      const res = await tool("/write", token, "payments.initiate", pay({ amount_cents: 6_000 }));
      const out = res.json!.result.structuredContent;
      expect(out.kind).to.equal("pending_step_up");
      expect(out.step_up_url.startsWith(`${APP_URL}/dashboard/agents/`)).to.equal(true);
    });

    it("-32002 policy_denied names the limit; -32003 insufficient_funds; simulate names the rule", async () => {
      // Inside tools/call a refusal is a result the model reads (isError), carrying the
      // JSON-RPC error it would have been; called directly, the same refusal is that error.
      const denied = await tool("/write", token, "payments.initiate", pay({ amount_cents: 10_001 }));
      expect(denied.json!.result.isError).to.equal(true);
      // No structuredContent (that is the result's, under its outputSchema): the error is
      // the text, as JSON, and _meta.error.
      expect(denied.json!.result).to.not.have.property("structuredContent");
      expect(denied.json!.result._meta.error).to.deep.include({ code: -32002, message: "per_tx_cap: the amount is over the per-transaction cap" });
      expect(denied.json!.result._meta.error.data).to.deep.include({ reason_id: "policy_denied", limit: "per_tx_cap" });
      expect(JSON.parse(denied.json!.result.content[0].text)).to.deep.equal({ error: denied.json!.result._meta.error });
      expect(denied.text).to.not.match(/remaining|allowance/);
      const direct = await call("/write", token, "payments.initiate", pay({ amount_cents: 10_001 }));
      expect(direct.json!.error).to.deep.include({ code: -32002, message: "per_tx_cap: the amount is over the per-transaction cap" });
      expect(direct.json!.error.data).to.deep.include({ reason_id: "policy_denied", limit: "per_tx_cap" });
      const chain = await tool("/write", token, "payments.initiate", pay({ counterparty: { address: "x", chain: "sol", token: "USDC" } }));
      expect(chain.json!.result._meta.error.data.limit).to.equal("chain_allowlist");
      // Invalid arguments are refusals the model can fix: isError too.
      const invalid = await tool("/write", token, "payments.initiate", pay({ amount_cents: -1 }));
      expect([invalid.json!.result.isError, invalid.json!.result._meta.error.code]).to.deep.equal([true, -32602]);
      const broke = await tool("/write", token, "payments.initiate", pay({ amount_cents: 4_000, idempotency_key: key() }));
      expect(broke.json!.result.structuredContent.kind).to.equal("accepted");
      for (const amount of [5_000, 5_000])
        expect((await tool("/write", token, "payments.initiate", pay({ amount_cents: amount }))).json!.result.isError).to.equal(false);
      // Today: 15,000 of the 20,000 daily cap spent.
      const sim = await call("/mcp/write", token, "payments.simulate", pay({ amount_cents: 5_001 }));
      expect(sim.json!.result).to.deep.equal({
        outcome: "denied",
        rule: "per_day_cap",
        broken_rules: [
          { reason_id: "per_day_cap", message: "the amount would go over today's cap" },
          { reason_id: "step_up_amount", message: "the amount needs the owner's step-up approval" },
        ],
      });
      const ok = await call("/mcp/write", token, "payments.simulate", pay({ amount_cents: 10 }));
      expect(ok.json!.result).to.deep.equal({ outcome: "accepted", rule: null, broken_rules: [] });
      // Every rule at once, the deciding one first; never an amount or an allowance.
      const many = await call(
        "/mcp/write",
        token,
        "payments.simulate",
        pay({ amount_cents: 10_001, counterparty: { address: "x", chain: "sol", token: "USDC" } }),
      );
      expect(many.json!.result.outcome).to.equal("denied");
      expect(many.json!.result.rule).to.equal("chain_allowlist");
      expect(many.json!.result.broken_rules.map((b: { reason_id: string }) => b.reason_id)).to.deep.equal([
        "chain_allowlist",
        "per_tx_cap",
        "per_day_cap",
        "step_up_amount",
      ]);
      expect(many.text).to.not.match(/remaining|allowance|\d{3,}/);
      // 15,000 left in the vault; drain it within the caps on the next day.
      stack.clock.advance(86_400_000);
      // A day later the hour-long access token has expired: the agent refreshes.
      token = await grantFor(stack, child);
      for (const amount of [5_000, 5_000, 4_000])
        expect((await tool("/write", token, "payments.initiate", pay({ amount_cents: amount }))).json!.result.isError).to.equal(false);
      const funds = await tool("/write", token, "payments.initiate", pay({ amount_cents: 1_001 }));
      const fundsError = funds.json!.result._meta.error;
      expect([funds.json!.result.isError, fundsError.code, fundsError.data.reason_id]).to.deep.equal([true, -32003, "insufficient_funds"]);
    });

    it("audit.list pages the agent's records with cursor and since", async () => {
      const page = await call("/mcp/read", token, "audit.list", { limit: 2 });
      const r = page.json!.result;
      expect(validators.get("audit.list")!.output(r)).to.equal(true);
      expect(r.records).to.have.length(2);
      expect(r.next_cursor).to.be.a("string");
      const next = await call("/mcp/read", token, "audit.list", { cursor: r.next_cursor });
      expect(next.json!.result.records[0].record_id).to.not.equal(r.records[1].record_id);
      const bad = await call("/mcp/read", token, "audit.list", { cursor: "forged.cursor" });
      expect([bad.json!.error.code, bad.json!.error.data.reason_id]).to.deep.equal([-32602, "invalid_cursor"]);
      // A cursor and a since name two places to start: which one wins would be a guess.
      const both = await call("/mcp/read", token, "audit.list", { cursor: r.next_cursor, since: r.watermark });
      expect([both.json!.error.code, both.json!.error.data.reason_id, both.json!.error.message]).to.deep.equal([
        -32602,
        "invalid_params",
        "send cursor or since, not both",
      ]);
    });

    it("-32002 when the read scopes are missing", async () => {
      const narrow = await grantFor(stack, child, { scopes: ["payments:initiate"] });
      const res = await call("/mcp/read", narrow, "accounts.balance", {});
      expect([res.json!.error.code, res.json!.error.data.reason_id]).to.deep.equal([-32002, "insufficient_scope"]);
    });

    it("payments.get reads with accounts:read or payments:initiate, as its _meta.scopes says, and with nothing else", async () => {
      const id = (await tool("/mcp/write", token, "payments.initiate", pay({ amount_cents: 1 }))).json!.result.structuredContent.payment_id as string;
      const listed = (await call("/mcp/read", token, "tools/list", {})).json!.result.tools as { name: string; _meta: { scopes: string[] } }[];
      const scopes = listed.find((t) => t.name === "payments.get")!._meta.scopes;
      expect(scopes).to.deep.equal(["accounts:read", "payments:initiate"]);
      for (const scope of scopes) {
        const narrow = await grantFor(stack, child, { scopes: [scope] });
        expect((await call("/mcp/read", narrow, "payments.get", { payment_id: id })).json!.result.payment_id, scope).to.equal(id);
      }
      for (const scope of ["payments:simulate", "audit:stream"]) {
        const narrow = await grantFor(stack, child, { scopes: [scope] });
        const res = await call("/mcp/read", narrow, "payments.get", { payment_id: id });
        expect([res.status, res.json!.error.code, res.json!.error.data.reason_id], scope).to.deep.equal([403, -32002, "insufficient_scope"]);
        expect(res.json!.error.message, scope).to.contain("accounts:read or payments:initiate");
      }
    });
  });
});
