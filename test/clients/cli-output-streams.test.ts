import { spawn, type StdioOptions } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { expect } from "chai";
import { runCli, useServiceProcess } from "../support/process.js";

const bin = fileURLToPath(new URL("../../bin/vaultgate.mjs", import.meta.url));

/**
 * Runs the real CLI with stdout given by the caller: `"closed"` is a pipe whose reader has gone
 * (as `| head -1` leaves it), a path is a file opened for writing (/dev/full: a full disk).
 */
async function runWithStdout(args: string[], env: Record<string, string>, stdout: "closed" | string) {
  const fd = stdout === "closed" ? undefined : openSync(stdout, "w");
  const stdio: StdioOptions = ["ignore", fd ?? "pipe", "pipe"];
  const child = spawn(process.execPath, [bin, ...args], { env: { ...process.env, ...env }, stdio });
  if (fd !== undefined) closeSync(fd);
  // The reader goes away before the command has written anything.
  else child.stdout!.destroy();
  let stderr = "";
  child.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("close", (c) => resolve(c)));
  return { code, stderr };
}

describe("vaultgate: output nobody can read is not a crash (real processes)", function () {
  this.timeout(120_000);
  const op = useServiceProcess("all");

  it("a reader that went away (| head -1) ends the command quietly, with its own exit status", async () => {
    for (const args of [["--help"], ["partner", "list"], ["partner", "bogus"]]) {
      const res = await runWithStdout(args, op.env, "closed");
      const expected = args[1] === "bogus" ? 2 : 0;
      expect([res.code, args.join(" ")]).to.deep.equal([expected, args.join(" ")]);
      if (expected === 0) expect(res.stderr, args.join(" ")).to.equal("");
      expect(res.stderr, args.join(" ")).to.not.match(/EPIPE|\n {4}at /);
    }
  });

  it("a full disk is one line naming it and exit 1; a partner created meanwhile is said to exist", async () => {
    const help = await runWithStdout(["--help"], op.env, "/dev/full");
    expect(help.code).to.equal(1);
    expect(help.stderr).to.match(/^vaultgate: could not write the output to stdout \(ENOSPC: no space left on device\)\n$/);

    const name = `Full Disk ${Math.random().toString(16).slice(2, 8)}`;
    const created = await runWithStdout(["partner", "create", "--name", name], op.env, "/dev/full");
    expect(created.code).to.equal(1);
    expect(created.stderr).to.match(/^vaultgate: could not write the output to stdout \(ENOSPC: no space left on device\); the command itself ran\n$/);
    // The operator is told the change happened: the partner is there, its secret to be rotated.
    const list = await runCli(["partner", "list", "--all"], op.env);
    expect((list.json!.partners as { name: string }[]).map((p) => p.name)).to.include(name);
  });
});
