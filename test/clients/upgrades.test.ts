import { expect } from "chai";
import { createDb } from "../../core/db/knex.js";
import { createScratchDatabase } from "../support/db.js";
import { runCli, startServiceProcess, tempDataDir } from "../support/process.js";

/** Rolling upgrades as operators run them: versions overlap on one database. */
describe("vaultgate upgrades (real processes)", function () {
  this.timeout(120_000);

  it("the previous version starts against a database a newer version has migrated", async () => {
    const dir = await tempDataDir();
    const scratch = await createScratchDatabase();
    const env = { DATA_DIR: dir.path, ...(scratch ? { DATABASE_URL: scratch.url } : {}) };
    try {
      const first = await runCli(["migrate"], env);
      expect(first.code, first.stderr).to.equal(0);
      // What a newer release leaves behind: a migration this code has never heard of.
      const db = createDb(scratch ? { url: scratch.url } : { dataDir: `${dir.path}/pgdata` });
      await db("knex_migrations").insert({ name: "9999-from-a-newer-release", batch: 999, migration_time: new Date() });
      await db.destroy();

      const again = await runCli(["migrate"], env);
      expect({ code: again.code, stderr: again.stderr, json: again.json }).to.deep.equal({ code: 0, stderr: "", json: { applied: [] } });
      const service = await startServiceProcess("all", env);
      try {
        const ready = await fetch(`${service.gatewayUrl}/readyz`);
        expect(ready.status, await ready.text()).to.equal(200);
      } finally {
        expect(await service.stop()).to.equal(0);
      }
    } finally {
      await scratch?.drop();
      await dir.remove();
    }
  });
});
