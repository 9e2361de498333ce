import { expect } from "chai";
import { runCli, startServiceProcess, tempDataDir } from "../support/process.js";

/** The embedded database (no DATABASE_URL) has one process at a time: real processes. */
describe("vaultgate: the embedded database's one owner", function () {
  this.timeout(120_000);

  it("a second process on the same DATA_DIR is refused while serve runs, and not after it died", async () => {
    const dir = await tempDataDir();
    const service = await startServiceProcess("all", { DATA_DIR: dir.path });
    try {
      const refused = await runCli(["migrate"], { DATA_DIR: dir.path });
      expect(refused.code, refused.stderr).to.equal(1);
      expect(refused.stderr).to.equal(
        `vaultgate: the embedded database in ${dir.path}/pgdata is open in process ${service.child.pid}: one process at a time uses it; stop that one first, or run CLI commands against the running service\n`,
      );
      // Killed outright, it leaves its lock behind: a dead holder's lock is taken over.
      await service.stop("SIGKILL");
      const after = await runCli(["migrate"], { DATA_DIR: dir.path });
      expect({ code: after.code, stderr: after.stderr, json: after.json }).to.deep.equal({ code: 0, stderr: "", json: { applied: [] } });
    } finally {
      await service.stop("SIGKILL");
      await dir.remove();
    }
  });
});
