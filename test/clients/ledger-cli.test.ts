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
    expect(JSON.parse(damaged.stdout)).to.deep.include({ ok: false, discrepancies: [{ check: "balance_mismatch", message: `vault ${user.vault_id} holds 4201 USD but its postings sum to 4200` }] });
  });
});
