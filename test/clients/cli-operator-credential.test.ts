import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { expect } from "chai";
import { runCli, tempDataDir, useServiceProcess } from "../support/process.js";

/** The operator credential the CLI presents: whatever is wrong with it, the message names where it came from, never its value. */
describe("vaultgate: an operator credential that cannot be sent is named, never printed (real processes)", function () {
  this.timeout(60_000);
  const op = useServiceProcess("all");

  it("an ADMIN_TOKEN with a line break or a non-ASCII character is refused naming ADMIN_TOKEN, without echoing it", async () => {
    for (const token of ["first-half-of-secret\nsecond-half-of-secret", "first-half-of-secret\r\nsecond-half", "first-half-of-secret€second-half"]) {
      const res = await runCli(["partner", "list"], { ...op.env, ADMIN_TOKEN: token });
      expect(res.code, res.stderr).to.equal(1);
      expect(res.stdout).to.equal("");
      expect(res.stderr).to.match(/^vaultgate: the operator credential from ADMIN_TOKEN has a line break, control or non-ASCII character: .*\n$/);
      expect(res.stderr).to.not.include("first-half-of-secret");
    }
    // A merely wrong one still reaches core, whose answer says it does not match.
    const wrong = await runCli(["partner", "list"], { ...op.env, ADMIN_TOKEN: "a wrong token with spaces" });
    expect(wrong.code, wrong.stderr).to.equal(1);
    expect(wrong.stderr).to.include("(admin_unauthenticated)");
  });

  it("an admin-token file with a line break inside is refused naming the file, without echoing it", async () => {
    const dir = await tempDataDir();
    try {
      await writeFile(join(dir.path, "admin-token"), "first-half-of-secret\nsecond-half-of-secret\n", { mode: 0o600 });
      const res = await runCli(["partner", "list"], { CORE_URL: op.env.CORE_URL!, DATA_DIR: dir.path, ADMIN_TOKEN: "" });
      expect(res.code, res.stderr).to.equal(1);
      expect(res.stderr).to.include(`the operator credential from ${dir.path}/admin-token (DATA_DIR=${dir.path}; ADMIN_TOKEN is unset) has a line break`);
      expect(res.stderr).to.not.include("half-of-secret");
    } finally {
      await dir.remove();
    }
  });
});
