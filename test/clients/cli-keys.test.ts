import { expect } from "chai";
import { runCli, useServiceProcess } from "../support/process.js";

/** `vaultgate keys rotate` and `vaultgate keys retire KID` against a real `vaultgate serve`. */
describe("vaultgate keys (CLI)", function () {
  this.timeout(120_000);
  const proc = useServiceProcess("all");

  const jwksKids = async () => {
    const res = await fetch(`${proc.service.gatewayUrl}/.well-known/agent-jwks.json`);
    return ((await res.json()) as { keys: { kid: string }[] }).keys.map((k) => k.kid);
  };

  it("rotates, refuses to retire the current key, then retires the previous one at once", async () => {
    const [first] = await jwksKids();
    expect(first).to.be.a("string");

    const rotated = await runCli(["keys", "rotate"], proc.env);
    expect(rotated.code, rotated.stderr).to.equal(0);
    const current = rotated.json!.kid as string;
    expect(rotated.json!.published_kids).to.include.members([first, current]);

    const refused = await runCli(["keys", "retire", current], proc.env);
    expect(refused.code).to.equal(1);
    expect(refused.stderr).to.include("rotate first").and.include("invalid_request");

    const retired = await runCli(["keys", "retire", first!], proc.env);
    expect(retired.code, retired.stderr).to.equal(0);
    expect(retired.json).to.deep.equal({ retired_kid: first, published_kids: [current] });
    expect(await jwksKids()).to.deep.equal([current]);
  });

  it("reports an unknown kid as not_found and a missing one as a usage error", async () => {
    const unknown = await runCli(["keys", "retire", "no-such-kid"], proc.env);
    expect(unknown.code).to.equal(1);
    expect(unknown.stderr).to.include("not_found");
    expect((await runCli(["keys", "retire"], proc.env)).code).to.equal(2);
    expect((await runCli(["keys", "bogus"], proc.env)).code).to.equal(2);
  });

  it("reads a kid that starts with '-' or '--' (a thumbprint can) as the kid, before or after other flags", async () => {
    for (const args of [`-6${"x".repeat(41)}`, `--t3NxBanyK4u-FZsAQCrZ0H2M4wNskBhXhTtQQw088`].flatMap((dashed) => [
      ["keys", "retire", dashed],
      ["keys", "retire", dashed, "--json"],
      ["keys", "retire", "--json", dashed],
    ])) {
      const res = await runCli(args, proc.env);
      expect(res.code, res.stderr).to.equal(1);
      expect(res.stderr).to.include("not_found");
    }
    // `-h` alone is still help.
    expect((await runCli(["keys", "retire", "-h"], proc.env)).code).to.equal(0);
  });
});
