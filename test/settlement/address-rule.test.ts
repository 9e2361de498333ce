import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { privateKeyToAccount } from "viem/accounts";
import { EVM_CHAINS } from "../../core/settlement/rules.js";
import { fundedChildBudget } from "../support/budgets.js";
import { requirePostgres } from "../support/db.js";
import { postRpc, startMcpStack, type McpStack } from "../support/mcp.js";

/**
 * The EVM address rule (0x and 40 hex digits, a valid EIP-55 checksum when in mixed case)
 * holds on every EVM chain on the sandbox rail too, for payments.initiate and
 * payments.simulate alike: what validates in development validates in production.
 */
describe("EVM addresses on the sandbox rail (MCP)", function () {
  this.timeout(120_000);
  let stack: McpStack;

  before(async () => {
    stack = await startMcpStack();
  });
  after(async () => {
    await stack?.close();
  });

  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
  const checksummed = () => privateKeyToAccount(`0x${randomBytes(32).toString("hex")}`).address;
  const args = (address: string, chain: string, amount = 100) => ({
    counterparty: { address, chain, token: "USDC" },
    amount_cents: amount,
    currency: "USD",
    idempotency_key: `p-${randomBytes(6).toString("hex")}`,
  });

  /** A funded budget on every chain and an agent token on it. */
  async function agent() {
    const { vaultId, agentToken: token } = await fundedChildBudget(stack, {
      fundCents: 100_000n,
      budget: { display_name: "Address budget", chain_allowlist: [...EVM_CHAINS, "sol"] },
    });
    const balance = async () => (await rpc("/mcp/read", token, "accounts.balance", {})).json!.result.balance_cents as number;
    return { token, vaultId, balance };
  }

  /** What a hostile or careless caller sends as an EVM address. */
  function oddShapes(): [string, string][] {
    const good = checksummed();
    const body = good.slice(2);
    const flipped = `0x${[...body].map((c) => (/[a-f]/.test(c) ? c.toUpperCase() : /[A-F]/.test(c) ? c.toLowerCase() : c)).join("")}`;
    return [
      ["upper-case 0X", `0X${body}`],
      ["41 hex digits", `${good}a`],
      ["39 hex digits", good.slice(0, -1)],
      ["leading space", ` ${good}`],
      ["trailing space", `${good} `],
      ["trailing newline", `${good}\n`],
      ["tab inside", `${good.slice(0, 20)}\t${good.slice(21)}`],
      ["Arabic-Indic digits", `0x${body.slice(0, 38)}\u0661\u0662`],
      ["fullwidth digits", `0x${body.slice(0, 38)}\uff11\uff12`],
      ["zero-width space", `0x\u200b${body.slice(1)}`],
      ["no 0x", body.padEnd(42, "0")],
      ["mixed case, broken checksum", flipped === good ? `0x${body.toLowerCase().replace(/[a-f]/, (c) => c.toUpperCase())}` : flipped],
      ["solana-looking", "SoLaNaAddr1111111111111111111111111111111"],
      ["the zero address", `0x${"0".repeat(40)}`],
    ];
  }

  it("refuses a malformed address on every EVM chain with -32602 and the reason, from initiate and simulate, moving nothing", async () => {
    const a = await agent();
    for (const chain of EVM_CHAINS) {
      for (const [shape, address] of oddShapes()) {
        for (const method of ["payments.initiate", "payments.simulate"]) {
          const r = await rpc("/mcp/write", a.token, method, args(address, chain));
          const what = `${method} ${chain} ${shape}`;
          expect(r.json!.error, what).to.not.equal(undefined);
          expect(r.json!.error.code, what).to.equal(-32602);
          expect(r.json!.error.data.reason_id, what).to.equal("invalid_params");
          expect(r.json!.error.message, what).to.match(/counterparty\.address/);
        }
      }
    }
    expect(await a.balance()).to.equal(100_000);
    const rows = await stack.core.db("agent_payments").where({ vault_id: a.vaultId }).count<{ count: string }[]>({ count: "*" });
    expect(Number(rows[0]!.count)).to.equal(0);
  });

  it("takes a checksummed, an all-lower-case and an all-upper-case address on every EVM chain; sol keeps its own addresses", async () => {
    const a = await agent();
    for (const chain of EVM_CHAINS) {
      const good = checksummed();
      for (const address of [good, good.toLowerCase(), `0x${good.slice(2).toUpperCase()}`]) {
        const sim = await rpc("/mcp/write", a.token, "payments.simulate", args(address, chain));
        expect(sim.json!.result, `${chain} ${address}`).to.deep.include({ outcome: "accepted" });
        const paid = await rpc("/mcp/write", a.token, "payments.initiate", args(address, chain));
        expect(paid.json!.result, `${chain} ${address}`).to.deep.include({ kind: "accepted", status: "completed" });
      }
    }
    const sol = await rpc("/mcp/write", a.token, "payments.initiate", args("SoLaNaAddr", "sol"));
    expect(sol.json!.result).to.deep.include({ kind: "accepted", status: "completed" });
    expect(await a.balance()).to.equal(100_000 - 100 * (EVM_CHAINS.length * 3 + 1));
  });

  it("many concurrent payments with good and malformed addresses: only the good ones move money (PostgreSQL)", async function () {
    requirePostgres(this, "concurrent payments need several connections");
    const a = await agent();
    const shapes = oddShapes().map(([, address]) => address);
    const calls = Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? checksummed() : shapes[i % shapes.length]!));
    const results = await Promise.all(calls.map((address, i) => rpc("/mcp/write", a.token, "payments.initiate", args(address, EVM_CHAINS[i % 5]!))));
    const accepted = results.filter((r) => r.json!.result?.kind === "accepted").length;
    const refused = results.filter((r) => r.json!.error?.code === -32602).length;
    expect([accepted, refused]).to.deep.equal([20, 20]);
    expect(await a.balance()).to.equal(100_000 - 20 * 100);
    expect((await stack.admin.audit.verifyLedger({})).discrepancies).to.deep.equal([]);
  });
});
