import { expect } from "chai";
import { createDb } from "../../core/db/knex.js";
import { createScratchDatabase } from "../support/db.js";
import { runCli, startServiceProcess, tempDataDir, type ServiceProcess } from "../support/process.js";

/** `vaultgate ledger verify` against a running `vaultgate serve`, clean and after damage. */
describe("vaultgate ledger verify (real processes)", function () {
  this.timeout(180_000);
  let dir: Awaited<ReturnType<typeof tempDataDir>>;
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  let env: Record<string, string>;
  let service: ServiceProcess | undefined;

  const start = async () => {
    service = await startServiceProcess("all", env);
    return { ...env, CORE_URL: service.coreUrl! };
  };

  before(async () => {
    dir = await tempDataDir();
    scratch = await createScratchDatabase();
    env = { DATA_DIR: dir.path, ...(scratch ? { DATABASE_URL: scratch.url } : {}) };
  });
  after(async () => {
    await service?.stop();
    await scratch?.drop();
    await dir?.remove();
  });

  it("proves clean books (exit 0), then names the first discrepancy and exits 1", async () => {
    let cli = await start();
    const user = (await runCli(["user", "create", "--email", "ledger-cli@example.test"], cli)).json!;
    expect((await runCli(["vault", "fund", user.vault_id as string, "--amount-cents", "4200"], cli)).code).to.equal(0);
    expect((await runCli(["ledger", "record", user.user_id as string, "--direction", "credit", "--amount-cents", "300"], cli)).code).to.equal(0);
    // A transfer of nothing is no entry: a usage error before core is asked, and nothing is booked.
    const nothing = await runCli(["ledger", "record", user.user_id as string, "--direction", "credit", "--amount-cents", "0"], cli);
    expect([nothing.code, nothing.stdout]).to.deep.equal([2, ""]);
    expect(nothing.stderr).to.include("--amount-cents must be an integer from 1 to 9007199254740991");

    const clean = await runCli(["ledger", "verify", "--json"], cli);
    expect(clean.code).to.equal(0);
    expect(clean.json).to.include({ ok: true });
    expect(clean.json!.discrepancies).to.deep.equal([]);
    expect(clean.json!.postings).to.be.at.least(4);

    // Damage a balance behind the ledger's back (the service is stopped: the embedded
    // database has one owner at a time), then ask again.
    await service!.stop();
    service = undefined;
    const db = createDb(scratch ? { url: scratch.url, poolMax: 1 } : { dataDir: `${dir.path}/pgdata` });
    await db.raw("UPDATE vaults SET balance_cents = balance_cents + 1 WHERE id = ?", [user.vault_id as string]);
    await db.destroy();
    cli = await start();
    const damaged = await runCli(["ledger", "verify", "--json"], cli);
    expect(damaged.code).to.equal(1);
    expect(damaged.stderr).to.include(`the ledger does not balance: vault ${user.vault_id} holds 4201 USD but its postings sum to 4200`);
    expect(JSON.parse(damaged.stdout)).to.deep.include({
      ok: false,
      discrepancies: [{ check: "balance_mismatch", message: `vault ${user.vault_id} holds 4201 USD but its postings sum to 4200` }],
    });
  });
});

/** Money a closed budget kept is a finding of `ledger verify` until it is swept back (real processes). */
describe("vaultgate ledger verify: stranded funds (real processes)", function () {
  this.timeout(180_000);
  let dir: Awaited<ReturnType<typeof tempDataDir>>;
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  let service: ServiceProcess | undefined;

  before(async () => {
    dir = await tempDataDir();
    scratch = await createScratchDatabase();
  });
  after(async () => {
    await service?.stop();
    await scratch?.drop();
    await dir?.remove();
  });

  it("names the closed budget's vault while it holds money (exit 0: the books balance), and no more once swept; no grant is issued on it", async () => {
    service = await startServiceProcess("all", { DATA_DIR: dir.path, ...(scratch ? { DATABASE_URL: scratch.url } : {}) });
    const cli = { DATA_DIR: dir.path, ...(scratch ? { DATABASE_URL: scratch.url } : {}), CORE_URL: service.coreUrl! };
    const user = (await runCli(["user", "create", "--email", "stranded-cli@example.test"], cli)).json!;
    expect((await runCli(["vault", "fund", user.vault_id as string, "--amount-cents", "5000"], cli)).code).to.equal(0);
    const issued = await runCli(
      ["grant", "issue", "--user", user.user_id as string, "--vault", user.vault_id as string, "--scopes", "agent:budget:create", "--step-up"],
      cli,
    );
    const token = issued.json!.access_token as string;
    const tool = async (name: string, args: Record<string, unknown>) => {
      const res = await fetch(`${service!.gatewayUrl}/mcp/treasury`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: name, params: args }),
      });
      const body = (await res.json()) as { result?: Record<string, unknown>; error?: unknown };
      expect(body.result, JSON.stringify(body)).to.not.equal(undefined);
      return body.result!;
    };
    const budget = await tool("agent.budget.create", {
      purpose: "trip",
      display_name: "Kept",
      chain_allowlist: ["base"],
      idempotency_key: "stranded-cli-budget",
    });
    const vaultId = budget.vault_id as string;
    await tool("agent.budget.fund", { vault_id: vaultId, amount_cents: 1200, idempotency_key: "stranded-cli-fund" });
    await tool("agent.budget.revoke", { vault_id: vaultId, keep_funds: true });

    const before = await runCli(["ledger", "verify", "--json"], cli);
    expect(before.code, before.stderr).to.equal(0);
    expect(before.json).to.include({ ok: true });
    expect(before.json!.discrepancies).to.deep.equal([]);
    expect(before.json!.findings).to.deep.equal([
      {
        check: "stranded_funds",
        vault_id: vaultId,
        parent_vault_id: user.vault_id,
        user_id: user.user_id,
        balance_cents: 1200,
        currency: "USD",
        message: `closed budget vault ${vaultId} holds 1200 USD; sweep it back to vault ${user.vault_id}`,
      },
    ]);

    const refused = await runCli(["grant", "issue", "--user", user.user_id as string, "--vault", vaultId, "--scopes", "accounts:read"], cli);
    expect(refused.code).to.not.equal(0);
    expect(refused.stderr).to.include("the vault belongs to a closed budget");

    expect(await tool("agent.budget.sweep", { vault_id: vaultId })).to.include({ swept_cents: 1200, nothing_to_sweep: false });
    const after = await runCli(["ledger", "verify", "--json"], cli);
    expect(after.code).to.equal(0);
    expect(after.json).to.include({ ok: true });
    expect(after.json!.findings).to.deep.equal([]);
  });
});
