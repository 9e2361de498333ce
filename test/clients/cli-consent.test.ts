import { expect } from "chai";
import { runCli, useServiceProcess } from "../support/process.js";

/** vaultgate consent grant|revoke against a real `vaultgate serve`. */
describe("vaultgate consent grant and revoke (real processes)", function () {
  this.timeout(120_000);
  const op = useServiceProcess("all");

  it("--scopes naming no scope is a usage error for grant and revoke; leaving it out of revoke revokes every scope", async () => {
    const tag = Math.random().toString(16).slice(2, 8);
    const partner = (await runCli(["partner", "create", "--name", `Consent ${tag}`], op.env)).json!;
    const user = (await runCli(["user", "create", "--email", `consent-${tag}@example.com`], op.env)).json!;
    const who = ["--partner", partner.client_id as string, "--user", user.user_id as string];
    const granted = await runCli(["consent", "grant", ...who, "--scopes", "kyc:read,wallet:read"], op.env);
    expect([granted.code, granted.json?.scopes]).to.deep.equal([0, ["kyc:read", "wallet:read"]]);

    for (const [sub, value, rest] of [
      ["revoke", "", "revoke every scope"],
      ["revoke", " , ,", "revoke every scope"],
      ["grant", "", "grant every consent scope"],
      ["grant", ",", "grant every consent scope"],
    ] as const) {
      const res = await runCli(["consent", sub, ...who, "--scopes", value], op.env);
      expect([res.code, res.stdout, res.stderr], `${sub} --scopes ${JSON.stringify(value)}`).to.deep.equal([
        2,
        "",
        `vaultgate: --scopes names no scope: give one or more (a,b), or leave --scopes out to ${rest}\nsee 'vaultgate consent ${sub} --help'\n`,
      ]);
    }

    // Nothing was revoked by the refused commands; revoking without --scopes still takes every scope.
    const one = await runCli(["consent", "revoke", ...who, "--scopes", "wallet:read"], op.env);
    expect([one.code, one.json?.scopes]).to.deep.equal([0, ["kyc:read"]]);
    const all = await runCli(["consent", "revoke", ...who], op.env);
    expect([all.code, all.json?.scopes]).to.deep.equal([0, []]);
  });
});
