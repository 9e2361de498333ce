import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { cliCoreSuite } from "../support/cli-core.js";
import { runCli } from "../support/process.js";

/** `vaultgate user set-email` and `user get` for an address stored before the current rule, as real processes. */
describe("operator CLI: a user's e-mail address", () => {
  const suite = cliCoreSuite();

  const vg = (...argv: string[]) => runCli([...argv, "--json"], suite.env);
  const tag = () => randomUUID().slice(0, 8);

  it("finds a user by a stored address that breaks the current rule and moves them to a new one", async () => {
    const broken = `a..${tag()}@example.com`;
    const id = randomUUID();
    await suite.stack.core.db("users").insert({ id, email: broken, status: "active", created_at: new Date() });
    const found = await vg("user", "get", "--email", broken.toUpperCase());
    expect(found.code, found.stderr).to.equal(0);
    expect(found.json).to.include({ user_id: id, email: broken });

    const next = `fixed-${tag()}@example.com`;
    const changed = await vg("user", "set-email", id, "--email", next.toUpperCase());
    expect(changed.code, changed.stderr).to.equal(0);
    expect(changed.json).to.deep.equal({ user_id: id, email: next, previous_email: broken, sessions_ended: 0 });
    expect((await vg("user", "get", "--email", next)).json).to.include({ user_id: id });
    const gone = await vg("user", "get", "--email", broken);
    expect(gone.code).to.equal(1);
    expect(gone.stderr).to.include("(not_found)");
  });

  it("refuses a bad address, another user's address and a wrong credential with exit 1; a missing --email is a usage error", async () => {
    const [emailA, emailB] = [`a-${tag()}@example.com`, `b-${tag()}@example.com`];
    const a = (await vg("user", "create", "--email", emailA)).json!;
    const b = (await vg("user", "create", "--email", emailB)).json!;
    const bad = await vg("user", "set-email", String(b.user_id), "--email", "ada@127.0.0.1");
    expect([bad.code, bad.stdout]).to.deep.equal([1, ""]);
    expect(bad.stderr).to.include("email must be an e-mail address (invalid_request)");
    const taken = await vg("user", "set-email", String(b.user_id), "--email", emailA.toUpperCase());
    expect(taken.code).to.equal(1);
    expect(taken.stderr).to.include("another user already has this e-mail address (invalid_request)");
    const missing = await vg("user", "set-email", String(b.user_id));
    expect(missing.code).to.equal(2);
    expect(missing.stderr).to.include("--email");
    const forged = await runCli(["user", "set-email", String(b.user_id), "--email", `c-${tag()}@example.com`, "--json"], {
      ...suite.env,
      ADMIN_TOKEN: "x".repeat(43),
    });
    expect(forged.code).to.equal(1);
    expect(forged.stderr).to.include("(admin_unauthenticated)");
    expect((await suite.stack.admin.partners.getUserByEmail({ email: emailA })).user!.userId).to.equal(a.user_id);
    expect((await suite.stack.admin.partners.getUserByEmail({ email: emailB })).user!.userId).to.equal(b.user_id);
  });

  it("documents the command in the help", async () => {
    const help = await runCli(["user", "set-email", "--help"], suite.env);
    expect(help.code).to.equal(0);
    expect(help.stdout).to.include("vaultgate user set-email USER_ID").and.include("--email EMAIL").and.include("web sessions end");
    expect((await runCli(["user", "--help"], suite.env)).stdout).to.include("set-email");
  });
});
