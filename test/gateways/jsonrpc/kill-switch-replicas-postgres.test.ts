import { randomBytes, randomUUID } from "node:crypto";
import { expect } from "chai";
import { requirePostgres, testDatabase } from "../../support/db.js";
import { fixtures } from "../../support/trust.js";
import type { JsonRpcReply } from "../../support/mcp.js";
import { postJsonRpc, startReplica, type Replica } from "../../support/replicas.js";

/**
 * Two replicas on one database: payments batch on A while the kill switch is pulled on B, and
 * nothing is paid after the revocation commits. PostgreSQL only: PGlite runs one query at a time.
 */
describe("kill switch across replicas during a payment batch (Postgres: needs several connections)", function () {
  this.timeout(120_000);
  let a: Replica;
  let b: Replica;

  before(async function () {
    requirePostgres(this, "two replicas need several connections");
    const { url } = await testDatabase();
    const adminToken = randomBytes(16).toString("hex");
    a = await startReplica(url!, { adminToken, poolMax: 10 });
    b = await startReplica(url!, { adminToken, poolMax: 10 });
  });
  after(async () => {
    await a?.close();
    await b?.close();
  });

  it("nothing is paid after the revocation commits, and every paid row committed before it", async () => {
    const f = fixtures(a);
    const user = await f.user();
    // A user's root vault has no policy: pay from an active budget vault (step-up grant),
    // funded by the operator, with an agent grant on the child vault.
    const budget = await f.fundedBudget(user, { fundCents: 1_000_000n });
    const agentToken = budget.agent.accessToken;
    const killer = await f.grant(user, { stepUp: true });

    // Batches of 20 (the most one may carry), back to back, as a client with many calls sends them.
    const BATCHES = 10;
    const SIZE = 20;
    const N = BATCHES * SIZE;
    const payBatch = (n: number) =>
      Array.from({ length: SIZE }, (_, i) => ({
        jsonrpc: "2.0",
        id: n * SIZE + i + 1,
        method: "payments.initiate",
        params: {
          counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
          amount_cents: 100,
          currency: "USD",
          idempotency_key: `ks-${n}-${i}-${randomUUID()}`,
        },
      }));
    const running = (async () => {
      const all: JsonRpcReply[] = [];
      for (let n = 0; n < BATCHES; n++) {
        const res = await postJsonRpc(`${a.url}/mcp/write`, payBatch(n), agentToken);
        expect(res.json, res.text.slice(0, 500)).to.be.an("array").with.length(SIZE);
        all.push(...(res.json as JsonRpcReply[]));
      }
      return all;
    })();

    // Pull the kill switch through replica B once replica A has paid something.
    const paidSoFar = async () => Number((await b.core.db("agent_payments").where({ vault_id: budget.vaultId }).count({ n: "*" }))[0]!.n);
    while ((await paidSoFar()) === 0) await new Promise((r) => setImmediate(r));
    const kill = await postJsonRpc(
      `${b.url}/mcp/treasury`,
      { jsonrpc: "2.0", id: 1, method: "killSwitch.all", params: { reason: "replica test" } },
      killer.accessToken,
    );
    const killAnswered = Date.now();
    expect((kill.json as JsonRpcReply | undefined)?.result?.revoked, kill.text).to.be.at.least(2);

    const replies = await running;
    expect(replies).to.have.length(N);
    const outcome = replies.map((r) =>
      r.result ? "paid" : r.error?.code === -32001 && r.error?.data?.reason_id === "invalid_token" ? "refused" : `other:${JSON.stringify(r.error)}`,
    );
    const firstRefusal = outcome.indexOf("refused");
    expect(
      outcome.filter((o) => o.startsWith("other")),
      "only payments or invalid_token refusals",
    ).to.deep.equal([]);
    expect(firstRefusal, "the kill switch landed before the batches ended").to.be.greaterThan(0);
    expect(
      outcome.slice(firstRefusal).every((o) => o === "refused"),
      "nothing succeeds after the first refusal",
    ).to.equal(true);

    // The database agrees: each paid element is one completed row, stamped before the kill switch
    // answered. (Stamps are taken before the grant lock, so they cannot order a payment against the
    // revocation's own stamp: the replies above do that.)
    const grant = await b.core.db("grants").where({ id: budget.agent.grantId }).first();
    expect(grant.state).to.equal("revoked");
    const rows = await b.core.db("agent_payments").where({ vault_id: budget.vaultId });
    expect(rows.length).to.equal(firstRefusal);
    for (const row of rows) {
      expect(row.status).to.equal("completed");
      const committed = new Date(row.completed_at ?? row.created_at).getTime();
      expect(committed, `payment ${row.id}`).to.be.at.most(killAnswered);
    }
    const vault = await b.core.db("vaults").where({ id: budget.vaultId }).first();
    expect(Number(vault.balance_cents)).to.equal(1_000_000 - 100 * firstRefusal);
  });
});
