import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { expect } from "chai";
import { decodeJwt } from "jose";
import { runCli, useServiceProcess } from "../support/process.js";

/** The operator's grant commands against a real `vaultgate serve`. */
describe("vaultgate grant issue and dev outbox (CLI)", function () {
  this.timeout(120_000);
  const proc = useServiceProcess("all");

  it("issues an OAuth token response for a user's vault, with --step-up", async () => {
    const user = (await runCli(["user", "create", "--email", "cli-grant@example.com"], proc.env)).json!;
    const res = await runCli(
      ["grant", "issue", "--user", user.user_id as string, "--vault", user.vault_id as string, "--scopes", "accounts:read,payments:initiate", "--step-up"],
      proc.env,
    );
    expect(res.code, res.stderr).to.equal(0);
    expect(Object.keys(res.json!).sort()).to.deep.equal(["access_token", "expires_in", "jti", "refresh_token", "scope", "token_type"]);
    expect(res.json!.scope).to.equal("accounts:read payments:initiate");
    const claims = decodeJwt(res.json!.access_token as string);
    expect(claims.jti).to.equal(res.json!.jti);
    expect(claims.vault_id).to.equal(user.vault_id);
    expect(claims.acr).to.equal("step-up");
  });

  it("on a terminal, grant issue reminds the operator that the tokens are shown once; a pipe gets JSON only", async () => {
    const user = (await runCli(["user", "create", "--email", "cli-grant-tty@example.com"], proc.env)).json!;
    const args = ["grant", "issue", "--user", user.user_id as string, "--vault", user.vault_id as string, "--scopes", "accounts:read"];
    // script(1) gives the command a terminal, where the text output and the reminders go.
    const bin = fileURLToPath(new URL("../../bin/vaultgate.mjs", import.meta.url));
    const line = `'${process.execPath}' '${bin}' ${args.join(" ")}`;
    const { stdout } = await promisify(execFile)("script", ["-qec", line, "/dev/null"], { env: { ...process.env, ...proc.env } });
    expect(stdout).to.match(/refresh_token: +\S+/);
    expect(stdout).to.include("Store access_token now: it is not shown again (grant issue issues a new grant).");
    expect(stdout).to.include("Store refresh_token now: it is not shown again (grant issue issues a new grant).");
    const piped = await runCli(args, proc.env);
    expect(piped.code, piped.stderr).to.equal(0);
    expect(piped.stderr).to.not.include("Store");
  });

  it("refuses a vault that is not the user's, and a missing --scopes", async () => {
    const a = (await runCli(["user", "create", "--email", "cli-a@example.com"], proc.env)).json!;
    const b = (await runCli(["user", "create", "--email", "cli-b@example.com"], proc.env)).json!;
    const wrong = await runCli(["grant", "issue", "--user", a.user_id as string, "--vault", b.vault_id as string, "--scopes", "accounts:read"], proc.env);
    expect(wrong.code).to.equal(1);
    expect(wrong.stderr).to.include("invalid_target");
    const usage = await runCli(["grant", "issue", "--user", a.user_id as string, "--vault", a.vault_id as string], proc.env);
    expect(usage.code).to.equal(2);
  });

  it("dev outbox shows the one-time code a sign-in sent, which the service log never contains", async () => {
    await runCli(["user", "create", "--email", "cli-otp@example.com"], proc.env);
    const page = await fetch(`${proc.service.gatewayUrl}/signin`);
    const cookie = page.headers.getSetCookie()[0]!.split(";")[0]!;
    const csrf = /name="csrf" value="([^"]+)"/.exec(await page.text())![1]!;
    const sent = await fetch(`${proc.service.gatewayUrl}/signin`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", cookie },
      body: new URLSearchParams({ csrf, email: "cli-otp@example.com" }).toString(),
      redirect: "manual",
    });
    expect(sent.status).to.equal(303);
    const out = await runCli(["dev", "outbox", "--email", "cli-otp@example.com"], proc.env);
    const messages = out.json!.messages as { email: string; subject: string }[];
    expect(messages).to.have.length(1);
    const code = /\d{6}/.exec(messages[0]!.subject)![0];
    expect(proc.service.output()).to.include("dev outbox");
    expect(proc.service.output()).to.not.match(new RegExp(`\\b${code}\\b`));
  });
});
