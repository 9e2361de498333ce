import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { fixtures, type Fixtures } from "../../support/trust.js";
import type { JsonRpcReply } from "../../support/mcp.js";
import { postJsonRpc } from "../../support/replicas.js";
import { MAX_BATCH_CALLS } from "../../../gateways/jsonrpc/plugin.js";
import { expectJsonRpcError } from "../../support/refusals.js";

/**
 * A JSON-RPC batch carries at most 20 calls. A bigger one is refused whole, as one
 * -32600 error with id null naming the limit, and none of its elements runs.
 */
describe("JSON-RPC batches hold at most 20 calls", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let f: Fixtures;

  before(async () => {
    stack = await startStack({ gateway: true });
    f = fixtures(stack);
  });
  after(() => stack?.close());

  const pay = (id: number, amount = 100) => ({
    jsonrpc: "2.0",
    id,
    method: "payments.initiate",
    params: {
      counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
      amount_cents: amount,
      currency: "USD",
      idempotency_key: `bl-${randomUUID()}`,
    },
  });
  const batchOf = (n: number) => Array.from({ length: n }, (_, i) => pay(i + 1));
  const paymentsOf = async (vaultId: string) => Number((await stack.core.db("agent_payments").where({ vault_id: vaultId }).count({ n: "*" }))[0]!.n);
  const balanceOf = async (vaultId: string) => Number((await stack.core.db("vaults").where({ id: vaultId }).first("balance_cents")).balance_cents);

  /** Each reply's result kind, in order ("accepted" for a payment that went through). */
  const kinds = (res: Awaited<ReturnType<typeof postJsonRpc>>) => (res.json as JsonRpcReply<{ kind?: string }>[]).map((r) => r.result?.kind);

  function expectRefusedWhole(res: Awaited<ReturnType<typeof postJsonRpc>>) {
    expect(res.status, res.text).to.equal(200);
    expect(res.json, res.text).to.not.be.an("array");
    expect((res.json as JsonRpcReply).id).to.equal(null);
    const error = expectJsonRpcError(res, -32600, "batch_too_large");
    expect(error.message).to.equal("Invalid Request: a batch may hold at most 20 calls");
    expect(error.data).to.deep.include({ max_batch_calls: 20 });
  }

  it("the limit is 20", () => {
    expect(MAX_BATCH_CALLS).to.equal(20);
  });

  it("a batch of 21 payments is one -32600 and pays nothing; a batch of 20 pays 20", async () => {
    const user = await f.user();
    const budget = await f.fundedBudget(user, { fundCents: 100_000n });

    expectRefusedWhole(await postJsonRpc(`${stack.url}/mcp/write`, batchOf(21), budget.agent.accessToken));
    expect(await paymentsOf(budget.vaultId)).to.equal(0);
    expect(await balanceOf(budget.vaultId)).to.equal(100_000);

    const ok = await postJsonRpc(`${stack.url}/mcp/write`, batchOf(20), budget.agent.accessToken);
    expect(ok.json, ok.text).to.be.an("array").with.length(20);
    expect(kinds(ok)).to.deep.equal(Array(20).fill("accepted"));
    expect(await paymentsOf(budget.vaultId)).to.equal(20);
    expect(await balanceOf(budget.vaultId)).to.equal(100_000 - 20 * 100);
  });

  it("hostile: a kill switch hidden at the end of an oversized batch revokes nothing, whatever the bearer", async () => {
    const user = await f.user();
    const owner = await f.grant(user, { stepUp: true });
    const batch = [
      ...Array.from({ length: 20 }, (_, i) => ({ jsonrpc: "2.0", id: i + 1, method: "ping" })),
      { jsonrpc: "2.0", id: 21, method: "killSwitch.all", params: { reason: "hidden" } },
    ];
    expectRefusedWhole(await postJsonRpc(`${stack.url}/mcp/treasury`, batch, owner.accessToken));
    // Notifications count too: 21 elements are 21 elements.
    const notes = Array.from({ length: 21 }, () => ({ jsonrpc: "2.0", method: "notifications/initialized" }));
    expectRefusedWhole(await postJsonRpc(`${stack.url}/mcp/treasury`, notes, owner.accessToken));
    const grant = await stack.core.db("grants").where({ id: owner.grantId }).first("state");
    expect(grant.state).to.equal("active");
    // Without a bearer, or with a forged one, the size is refused the same way.
    expectRefusedWhole(await postJsonRpc(`${stack.url}/mcp/treasury`, batch));
    expectRefusedWhole(await postJsonRpc(`${stack.url}/mcp/treasury`, batch, "not-a-token"));
    expect((await stack.core.db("grants").where({ id: owner.grantId }).first("state")).state).to.equal("active");
  });

  it("many batches at once: every oversized one pays nothing, every one of 20 pays all of its calls", async () => {
    const user = await f.user();
    const budget = await f.fundedBudget(user, { fundCents: 1_000_000n });
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) => postJsonRpc(`${stack.url}/mcp/write`, batchOf(i % 2 === 0 ? 21 + i : 20), budget.agent.accessToken)),
    );
    answers.forEach((res, i) => {
      if (i % 2 === 0) expectRefusedWhole(res);
      else expect(kinds(res), res.text.slice(0, 300)).to.deep.equal(Array(20).fill("accepted"));
    });
    expect(await paymentsOf(budget.vaultId)).to.equal(6 * 20);
    expect(await balanceOf(budget.vaultId)).to.equal(1_000_000 - 6 * 20 * 100);
  });
});
