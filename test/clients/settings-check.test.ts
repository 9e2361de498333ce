import { expect } from "chai";
import { runCli } from "../support/process.js";
import { useScratchEnv } from "../support/scratch-env.js";

/** Settings `vaultgate serve` must refuse before anything starts, naming the variable. */
describe("vaultgate serve: settings refused at start (real processes)", function () {
  this.timeout(60_000);
  const scratch = useScratchEnv();

  it("a short or spaced ADMIN_TOKEN stops the start without echoing it; the CLI still only presents it", async () => {
    for (const token of ["hunter2", "a long token with spaces in it"]) {
      const res = await runCli(["serve"], { ...scratch.env, ADMIN_TOKEN: token });
      expect(res.code, res.stderr).to.equal(1);
      expect(res.stderr).to.include("ADMIN_TOKEN must be 16 to 512 printable ASCII characters without spaces");
      expect(res.stderr + res.stdout).to.not.include(token);
    }
  });

  it("a public address with a query or fragment stops the start, naming the variable", async () => {
    for (const [name, value] of [
      ["BASE_URL", "https://api.example.com/?tenant=1"],
      ["ISSUER", "https://api.example.com/#x"],
      ["APP_URL", "https://app.example.com?"],
    ]) {
      const res = await runCli(["serve"], { ...scratch.env, [name!]: value! });
      expect(res.code, res.stderr).to.equal(1);
      expect(res.stderr).to.equal(`vaultgate: ${name} must not carry a query or fragment\n`);
    }
  });

  it("a public address not written as URLs print it stops the start, naming the spelling to use", async () => {
    for (const [name, value, canonical] of [
      ["MCP_URL", "https://MCP.Example.com:443", "https://mcp.example.com"],
      ["ISSUER", "https://auth.example.com:443/tenant", "https://auth.example.com/tenant"],
      ["BASE_URL", "http://api.example.com:80/./v1/", "http://api.example.com/v1"],
    ]) {
      const res = await runCli(["serve"], { ...scratch.env, [name!]: value! });
      expect(res.code, res.stderr).to.equal(1);
      expect(res.stderr).to.equal(`vaultgate: ${name} must be written as ${canonical} (lower-case host, no default port)\n`);
    }
  });

  it("a HOST, CORE_HOST or METRICS_HOST written with a port or brackets stops serve (and the CLI for CORE_HOST), naming the setting", async () => {
    const base = { ...scratch.env, ADMIN_TOKEN: "" };
    for (const [name, value, port] of [
      ["HOST", "0.0.0.0:8080", "PORT"],
      ["HOST", "[::1]", "PORT"],
      ["CORE_HOST", "127.0.0.1:8081", "CORE_PORT"],
      ["METRICS_HOST", "127.0.0.1:9464", "METRICS_PORT"],
    ] as const) {
      for (const args of [["serve"], ["partner", "list"]]) {
        const res = await runCli(args, { ...base, METRICS_PORT: "0", [name]: value });
        expect(res.code, res.stderr).to.equal(1);
        // Only serve listens on HOST and METRICS_HOST: the CLI goes on to dial core, and CORE_PORT=0 cannot be dialled.
        const dialled = (name === "HOST" || name === "METRICS_HOST") && args[0] !== "serve";
        expect(res.stderr).to.equal(
          dialled
            ? "vaultgate: CORE_PORT=0 cannot be dialled: 0 lets a listening core pick any free port. Set CORE_PORT to the port core listens on, or CORE_URL to its address\n"
            : `vaultgate: ${name} must be a host name or IP address, without a port or brackets (the port is ${port})\n`,
        );
      }
    }
    // An IPv6 address is written bare: the CLI goes on to look for its credential (CORE_PORT=0 cannot be dialled).
    const bare = await runCli(["partner", "list"], { ...base, CORE_PORT: "8081", HOST: "::1", CORE_HOST: "::1" });
    expect(bare.stderr).to.match(/^vaultgate: no operator credential/);
  });

  it("a gateway given CORE_TLS_CA but a cleartext CORE_URL stops the start instead of ignoring the CA", async () => {
    const env = { ...scratch.env, CORE_URL: "http://127.0.0.1:9", GATEWAY_TOKEN: "g".repeat(32), CORE_TLS_CA: `${scratch.dir}/ca.pem` };
    const res = await runCli(["serve", "--role", "gateway"], env);
    expect(res.code, res.stderr).to.equal(1);
    expect(res.stderr).to.equal(
      "vaultgate: CORE_TLS_CA is set but CORE_URL=http://127.0.0.1:9 is not https://: the CA only applies to TLS; dial core with https:// or unset CORE_TLS_CA\n",
    );
  });
});
