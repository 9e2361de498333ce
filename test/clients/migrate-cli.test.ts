import { expect } from "chai";
import { createDb } from "../../core/db/knex.js";
import { createScratchDatabase } from "../support/db.js";
import { runCli, tempDataDir } from "../support/process.js";

/** `vaultgate migrate` speaks for itself: one line of its own when a migration cannot run, never knex's. */
describe("vaultgate migrate: failures in its own words (real processes)", function () {
  this.timeout(120_000);

  /** A fresh database, prepared by `setup` before migrate runs. */
  async function migrateAfter(setup: string[]) {
    const dir = await tempDataDir();
    const scratch = await createScratchDatabase();
    try {
      const db = createDb(scratch ? { url: scratch.url } : { dataDir: `${dir.path}/pgdata` });
      for (const sql of setup) await db.raw(sql);
      await db.destroy();
      return await runCli(["migrate"], { DATA_DIR: dir.path, ...(scratch ? { DATABASE_URL: scratch.url } : {}) });
    } finally {
      await scratch?.drop();
      await dir.remove();
    }
  }

  it("a migration that fails is named with the database's reason, on one line", async () => {
    const res = await migrateAfter(["CREATE TABLE partners (x int)"]);
    expect(res.code).to.equal(1);
    expect(res.stdout).to.equal("");
    expect(res.stderr).to.equal('vaultgate: migration 0001-platform failed: relation "partners" already exists\n');
  });

  it("a migration lock left held says how to release it, not knex's command", async () => {
    const res = await migrateAfter([
      "CREATE TABLE knex_migrations_lock (index serial PRIMARY KEY, is_locked integer)",
      "INSERT INTO knex_migrations_lock (is_locked) VALUES (1)",
    ]);
    expect(res.code).to.equal(1);
    expect(res.stdout).to.equal("");
    expect(res.stderr).to.equal(
      "vaultgate: migrations are locked (knex_migrations_lock.is_locked = 1): if no vaultgate is migrating this database, " +
        "release the lock with UPDATE knex_migrations_lock SET is_locked = 0 and run migrate again\n",
    );
  });
});
