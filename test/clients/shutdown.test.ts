import { readFileSync } from "node:fs";
import { expect } from "chai";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AuditService } from "../../gen/vaultgate/audit/v1/audit_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { createScratchDatabase } from "../support/db.js";
import { runCli, startServiceProcess, tempDataDir } from "../support/process.js";
import { expectRefused } from "../support/refusals.js";

const messages = (output: string) =>
  output
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => (JSON.parse(l) as { msg: string }).msg);

/** SIGTERM as an orchestrator sends it, against real processes. */
describe("vaultgate serve: stopping (real processes)", function () {
  this.timeout(120_000);

  it("a core with an open audit tail stops cleanly: the tail ends UNAVAILABLE, the process exits 0", async () => {
    const dir = await tempDataDir();
    const scratch = await createScratchDatabase();
    const env = { DATA_DIR: dir.path, ...(scratch ? { DATABASE_URL: scratch.url } : {}) };
    const core = await startServiceProcess("core", { ...env, SHUTDOWN_GRACE_SECONDS: "5" });
    try {
      const created = await runCli(["partner", "create", "--name", "Tail Co"], { ...env, CORE_URL: core.coreUrl! });
      expect(created.code, created.stderr).to.equal(0);
      const admin = readFileSync(`${dir.path}/admin-token`, "utf8").trim();
      const audit = createClient(AuditService, createGrpcTransport({ baseUrl: core.coreUrl! }));
      const tail = audit.tailRecords({ since: "0" }, { headers: { authorization: `Bearer ${admin}` } })[Symbol.asyncIterator]();
      // The first record proves the stream is open on core before the signal.
      expect((await tail.next()).done).to.equal(false);
      const drained = (async () => {
        while (!(await tail.next()).done);
      })();
      const refused = expectRefused(drained, Reason.UNAVAILABLE, /shutting down/);
      expect(await core.stop("SIGTERM"), core.output()).to.equal(0);
      const refusal = await refused;
      expect(refusal.detail.retryAfterSeconds).to.be.greaterThan(0);
      expect(messages(core.output()).slice(-2), core.output()).to.deep.equal(["shutting down", "stopped"]);
    } finally {
      await core.stop("SIGKILL");
      await scratch?.drop();
      await dir.remove();
    }
  });
});
