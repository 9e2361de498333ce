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

/** Runs the real CLI through a shell that closes its stdout (`>&-`, as a script may), or redirects it to `redirect`. */
async function runWithClosedStdout(args: string[], env: Record<string, string>, redirect = ">&-") {
  const child = spawn("sh", ["-c", `exec "$0" "$@" ${redirect}`, process.execPath, bin, ...args], {
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
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

  it("a reader that went away from a shown-once secret (partner create | true) is exit 1 naming what replaces it", async () => {
    const name = `Closed Pipe ${Math.random().toString(16).slice(2, 8)}`;
    const created = await runWithStdout(["partner", "create", "--name", name], op.env, "closed");
    expect(created.code).to.equal(1);
    expect(created.stderr).to.match(
      /^vaultgate: stdout was closed before the output was written: client_secret was not delivered and cannot be shown again; vaultgate partner rotate-secret gpc_[\w-]+ replaces it\n$/,
    );
    const list = await runCli(["partner", "list", "--all"], op.env);
    const partner = (list.json!.partners as { name: string; client_id: string }[]).find((p) => p.name === name)!;
    expect(created.stderr).to.include(`rotate-secret ${partner.client_id} replaces it`);

    const rotated = await runWithStdout(["partner", "rotate-secret", partner.client_id], op.env, "closed");
    expect([rotated.code, rotated.stderr]).to.deep.equal([
      1,
      `vaultgate: stdout was closed before the output was written: client_secret was not delivered and cannot be shown again; vaultgate partner rotate-secret ${partner.client_id} replaces it\n`,
    ]);

    const user = (await runCli(["user", "create", "--email", `closed-pipe-${Math.random().toString(16).slice(2, 8)}@example.com`], op.env)).json!;
    const issued = await runWithStdout(
      ["grant", "issue", "--user", user.user_id as string, "--vault", user.vault_id as string, "--scopes", "accounts:read"],
      op.env,
      "closed",
    );
    expect([issued.code, issued.stderr]).to.deep.equal([
      1,
      "vaultgate: stdout was closed before the output was written: access_token and refresh_token were not delivered and cannot be shown again; vaultgate grant issue issues a new grant\n",
    ]);
  });

  it("a webhook secret the operator supplied is not lost to a closed reader; one made by the command is", async () => {
    const name = `Webhook Pipe ${Math.random().toString(16).slice(2, 8)}`;
    const created = await runCli(["partner", "create", "--name", name], op.env);
    const clientId = created.json!.client_id as string;
    const supplied = `whsec_${Buffer.alloc(32, 7).toString("base64")}`;
    const given = await runWithStdout(["partner", "webhook", clientId, "--url", "http://127.0.0.1:9/hooks", "--secret", supplied], op.env, "closed");
    expect([given.code, given.stderr]).to.deep.equal([0, ""]);

    const made = await runWithStdout(["partner", "webhook", clientId, "--url", "http://127.0.0.1:9/hooks"], op.env, "closed");
    expect([made.code, made.stderr]).to.deep.equal([
      1,
      `vaultgate: stdout was closed before the output was written: webhook_secret was not delivered and cannot be shown again; vaultgate partner webhook ${clientId} replaces it\n`,
    ]);
  });

  it("a closed stdout (>&-) is exit 1 with one line saying so (and that a change was made), or naming a lost secret; >/dev/null is no failure", async () => {
    const version = await runWithClosedStdout(["--version"], op.env);
    expect([version.code, version.stderr]).to.deep.equal([1, "vaultgate: could not write the output to stdout (EBADF: stdout is closed)\n"]);
    const list = await runWithClosedStdout(["partner", "list"], op.env);
    // A read-only command's lost output is no change made.
    expect([list.code, list.stderr]).to.deep.equal([1, "vaultgate: could not write the output to stdout (EBADF: stdout is closed)\n"]);
    // Output discarded on purpose is not lost.
    const discarded = await runWithClosedStdout(["partner", "list"], op.env, ">/dev/null");
    expect([discarded.code, discarded.stderr]).to.deep.equal([0, ""]);
    // A command that fails before printing says only why it failed.
    const usage = await runWithClosedStdout(["partner", "rotate-secret"], op.env);
    expect([usage.code, usage.stderr]).to.deep.equal([2, "vaultgate: CLIENT_ID is required\nsee 'vaultgate partner rotate-secret --help'\n"]);

    const name = `Closed Stdout ${Math.random().toString(16).slice(2, 8)}`;
    const created = await runWithClosedStdout(["partner", "create", "--name", name], op.env);
    const partner = ((await runCli(["partner", "list", "--all"], op.env)).json!.partners as { name: string; client_id: string }[]).find(
      (p) => p.name === name,
    )!;
    expect([created.code, created.stderr]).to.deep.equal([
      1,
      `vaultgate: stdout was closed before the output was written: client_secret was not delivered and cannot be shown again; vaultgate partner rotate-secret ${partner.client_id} replaces it\n`,
    ]);
    // A change without a secret in its output was made: the operator is told so.
    const suspended = await runWithClosedStdout(["partner", "suspend", partner.client_id], op.env);
    expect([suspended.code, suspended.stderr]).to.deep.equal([
      1,
      "vaultgate: could not write the output to stdout (EBADF: stdout is closed); the command itself ran\n",
    ]);
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
