import { spawn } from "node:child_process";
import { once } from "node:events";
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { expect } from "chai";
import { runCli, tempDataDir, useServiceProcess } from "../support/process.js";

/**
 * Settings and command lines an operator gets slightly wrong: each is refused with one line
 * that names what to fix, never a driver's or OpenSSL's text, never a secret.
 */
describe("vaultgate: an operator's mistakes are named (real processes)", function () {
  this.timeout(60_000);
  const op = useServiceProcess("all");

  it("a DATABASE_URL that does not parse is refused, not replaced by the driver's localhost:5432", async () => {
    const dir = await tempDataDir();
    try {
      // A typo in the port, a '#' not percent-encoded in the password, an unclosed IPv6 host.
      for (const url of [
        "postgres://ops:secret-pw@db.internal:54e2/vaultgate",
        "postgres://ops:se#cret-pw@10.0.0.1/vaultgate",
        "postgres://ops:secret-pw@[::1",
      ]) {
        for (const cmd of ["migrate", "serve"]) {
          const res = await runCli([cmd], { DATA_DIR: dir.path, DATABASE_URL: url, PORT: "0", CORE_PORT: "0" });
          expect(res.code, `${cmd} ${res.stderr}`).to.equal(1);
          expect(res.stderr).to.match(/^vaultgate: DATABASE_URL is not a valid URL \(.*\)\n$/);
          expect(res.stdout).to.equal("");
          expect(res.stderr).to.not.include("secret");
        }
      }
    } finally {
      await dir.remove();
    }
  });

  it("a DATABASE_URL naming an ssl file that cannot be read is refused before any connection, naming DATABASE_URL", async () => {
    const dir = await tempDataDir();
    try {
      const url = `postgres://ops:secret-pw@127.0.0.1:1/vaultgate?sslrootcert=${dir.path}/missing-ca.pem`;
      const res = await runCli(["migrate"], { DATA_DIR: dir.path, DATABASE_URL: url });
      expect(res.code, res.stderr).to.equal(1);
      expect(res.stderr).to.match(/^vaultgate: DATABASE_URL names an ssl file that cannot be read: .*missing-ca\.pem.*\n$/);
      expect(res.stderr).to.not.include("secret");
    } finally {
      await dir.remove();
    }
  });

  it("https:// to a core that serves cleartext says so, not OpenSSL's record error", async () => {
    const coreUrl = op.env.CORE_URL!.replace(/^http:/, "https:");
    const res = await runCli(["partner", "list"], { ...op.env, CORE_URL: coreUrl });
    expect(res.code).to.equal(1);
    expect(res.stdout).to.equal("");
    expect(res.stderr).to.equal(
      `vaultgate: core at ${coreUrl} does not speak TLS: dial it with http:// (CORE_URL), or give core CORE_TLS_CERT and CORE_TLS_KEY (Unavailable)\n`,
    );
    // The same right setting still works: the message pointed at the one thing to change.
    expect((await runCli(["partner", "list"], op.env)).code).to.equal(0);
  });

  it("ledger record and treasury bind refuse a currency core would refuse as a usage error (exit 2), before dialling core", async () => {
    const user = (await runCli(["user", "create", "--email", `cur-${Date.now()}@example.com`], op.env)).json as { user_id: string };
    const unreachable = { ...op.env, CORE_URL: "http://127.0.0.1:9" };
    for (const [currency, hint] of [
      ["usd", " (did you mean USD?)"],
      ["dollars", ""],
      ["XYZ", ""],
      ["", ""],
    ] as const) {
      const record = ["ledger", "record", user.user_id, "--direction", "credit", "--amount-cents", "5", "--currency", currency];
      const bind = ["treasury", "bind", "--partner", "gpc_x_1", "--payer-entity-id", user.user_id, "--balance-cents", "5", "--currency", currency];
      for (const args of [record, bind]) {
        const res = await runCli(args, unreachable);
        expect(res.code, res.stderr).to.equal(2);
        expect(res.stdout).to.equal("");
        expect(res.stderr).to.equal(
          `vaultgate: --currency must be an ISO 4217 code in upper case, such as USD or EUR${hint}\nsee 'vaultgate ${args[0]} ${args[1]} --help'\n`,
        );
      }
    }
    for (const [direction, status, named] of [
      ["in", "settled", "--direction must be credit or debit"],
      ["credit", "done", "--status must be pending, settled or failed"],
    ]) {
      const res = await runCli(["ledger", "record", user.user_id, "--direction", direction!, "--amount-cents", "5", "--status", status!], unreachable);
      expect(res.code, res.stderr).to.equal(2);
      expect(res.stderr).to.match(new RegExp(`^vaultgate: ${named}\n`));
    }
    const recorded = await runCli(["ledger", "record", user.user_id, "--direction", "credit", "--amount-cents", "5", "--currency", "EUR"], op.env);
    expect(recorded.code, recorded.stderr).to.equal(0);
    expect(recorded.json).to.include({ currency: "EUR", amount_cents: 5 });
  });

  it("a status or block number not in its list is a usage error (exit 2) even where no operator credential is found", async () => {
    const empty = await tempDataDir();
    try {
      const env = { CORE_URL: op.env.CORE_URL!, DATA_DIR: empty.path, ADMIN_TOKEN: "" };
      for (const [args, named] of [
        [["user", "set-kyc", "6f1c", "--status", "done"], "--status must be one of not_started|pending|approved|rejected"],
        [["user", "set-status", "6f1c", "on"], "STATUS must be one of active|inactive"],
        [["partner", "create", "--name", "Acme", "--status", "live"], "--status must be active or pending"],
        [["ledger", "verify", "--from-block", "5"], "--from-block goes with --chains"],
        [["ledger", "verify", "--chains", "--from-block", "latest"], "--from-block must be a block number"],
      ] as const) {
        const res = await runCli([...args], env);
        expect(res.code, res.stderr).to.equal(2);
        expect(res.stdout).to.equal("");
        expect(res.stderr).to.match(new RegExp(`^vaultgate: ${named.replace(/[|]/g, "\\|")}.*\nsee 'vaultgate ${args[0]} ${args[1]} --help'\n$`));
      }
    } finally {
      await empty.remove();
    }
  });

  it("CORE_TLS_CA with a cleartext core URL is refused, not ignored; with https:// it must be a readable PEM certificate", async () => {
    const dir = await tempDataDir();
    try {
      const ca = `${dir.path}/ca.pem`;
      await writeFile(ca, "not a certificate\n");
      const core = new URL(op.env.CORE_URL!);
      const viaDefault = { ...op.env, CORE_URL: "", CORE_PORT: core.port, CORE_TLS_CA: ca };
      for (const [env, named] of [
        [{ ...op.env, CORE_TLS_CA: ca }, `CORE_URL=${core.origin}`],
        [viaDefault, `${core.origin} (CORE_HOST and CORE_PORT; CORE_URL is unset)`],
      ] as const) {
        const res = await runCli(["partner", "list"], env);
        expect(res.code, res.stderr).to.equal(1);
        expect(res.stdout).to.equal("");
        expect(res.stderr).to.equal(
          `vaultgate: CORE_TLS_CA is set but ${named} is not https://: the CA only applies to TLS; dial core with https:// or unset CORE_TLS_CA\n`,
        );
      }
      const https = { ...op.env, CORE_URL: "https://127.0.0.1:9" };
      for (const [file, message] of [
        [`${dir.path}/absent.pem`, `CORE_TLS_CA: cannot read ${dir.path}/absent.pem (ENOENT)`],
        [ca, `CORE_TLS_CA: ${ca} is not a PEM file`],
      ]) {
        const res = await runCli(["partner", "list"], { ...https, CORE_TLS_CA: file! });
        expect(res.code, res.stderr).to.equal(1);
        expect(res.stderr).to.equal(`vaultgate: ${message}\n`);
      }
    } finally {
      await dir.remove();
    }
  });

  it("dev chain refuses a JSON output it cannot give, before starting a node", async () => {
    // Core's port is taken: a node started by mistake would fail at once rather than run on.
    const taken = new URL(op.env.CORE_URL!).port;
    for (const args of [["--format", "json"], ["--json"]]) {
      const res = await runCli(["dev", "chain", ...args, "--port", taken], op.env);
      expect(res.code, res.stderr).to.equal(2);
      expect(res.stdout).to.equal("");
      expect(res.stderr).to.match(/^vaultgate: .*\nsee 'vaultgate dev chain --help'\n$/);
    }
  });

  it("on a terminal, partner webhook reminds the operator that webhook_secret is shown once", async () => {
    const created = await runCli(["partner", "create", "--name", "Hooked"], op.env);
    const clientId = (created.json as { client_id: string }).client_id;
    // script(1) gives the command a terminal, where the text output and the reminder go. It stops
    // reading the terminal soon after its child exits, so the shell stays until its last line is read.
    const bin = fileURLToPath(new URL("../../bin/vaultgate.mjs", import.meta.url));
    const line = `'${process.execPath}' '${bin}' partner webhook ${clientId} --url https://hooks.example/in; echo "exited $?"; read -r _`;
    const script = spawn("script", ["-qc", line, "/dev/null"], { env: { ...process.env, ...op.env }, stdio: ["pipe", "pipe", "inherit"] });
    let stdout = "";
    script.stdout.setEncoding("utf8").on("data", (chunk: string) => {
      stdout += chunk;
      if (/exited \d+/.test(stdout)) script.stdin.end();
    });
    await once(script, "close");
    expect(stdout).to.match(/exited 0\r?\n/);
    expect(stdout).to.match(/webhook_secret: +whsec_/);
    expect(stdout).to.include("Store webhook_secret now: it is not shown again (partner webhook replaces it).");
  });
});
