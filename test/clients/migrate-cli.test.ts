import { expect } from "chai";
import { createDb } from "../../core/db/knex.js";
import { createScratchDatabase } from "../support/db.js";
import { runCli, tempDataDir } from "../support/process.js";

/**
 * `vaultgate migrate` and `serve` (which migrates first) speak for themselves: one line of their
 * own when a migration cannot run, never knex's lines or its `knex migrate:unlock` advice.
 */
describe("vaultgate migrate and serve: failed migrations in their own words (real processes)", function () {
  this.timeout(120_000);

  /** A fresh database, prepared by `setup` before the command runs. */
  async function runAfter(command: "migrate" | "serve", setup: string[]) {
    const dir = await tempDataDir();
    const scratch = await createScratchDatabase();
    try {
      const db = createDb(scratch ? { url: scratch.url } : { dataDir: `${dir.path}/pgdata` });
      for (const sql of setup) await db.raw(sql);
      await db.destroy();
      const env = { DATA_DIR: dir.path, PORT: "0", CORE_PORT: "0", LOG_LEVEL: "info", ...(scratch ? { DATABASE_URL: scratch.url } : {}) };
      return await runCli([command], env);
    } finally {
      await scratch?.drop();
      await dir.remove();
    }
  }

  /** stdout: nothing from migrate; serve's JSON log, with no line of knex's about the migration. */
  function expectNoKnexLines(command: string, stdout: string) {
    if (command === "migrate") {
      expect(stdout).to.equal("");
      return;
    }
    for (const line of stdout.split("\n").filter(Boolean)) {
      const entry = JSON.parse(line) as { msg: string };
      expect(entry.msg, line).to.not.match(/migrat|knex|lock/i);
    }
  }

  for (const command of ["migrate", "serve"] as const) {
    it(`${command}: a migration that fails is named with the database's reason, on one line`, async () => {
      const res = await runAfter(command, ["CREATE TABLE partners (x int)"]);
      expect(res.code).to.equal(1);
      expectNoKnexLines(command, res.stdout);
      expect(res.stderr).to.equal('vaultgate: migration 0001-platform failed: relation "partners" already exists\n');
    });

    it(`${command}: a migration lock left held says how to release it, not knex's command`, async () => {
      const res = await runAfter(command, [
        "CREATE TABLE knex_migrations_lock (index serial PRIMARY KEY, is_locked integer)",
        "INSERT INTO knex_migrations_lock (is_locked) VALUES (1)",
      ]);
      expect(res.code).to.equal(1);
      expectNoKnexLines(command, res.stdout);
      expect(res.stderr).to.equal(
        "vaultgate: migrations are locked (knex_migrations_lock.is_locked = 1): if no vaultgate is migrating this database, " +
          "release the lock with UPDATE knex_migrations_lock SET is_locked = 0 and run migrate again\n",
      );
    });
  }
});
