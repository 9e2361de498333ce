import { expect } from "chai";
import { runCli, useServiceProcess } from "../support/process.js";

/** A setting's bad value refuses the commands that use it, and only those (real processes). */
describe("vaultgate: a bad setting refuses only the commands that use it (real processes)", function () {
  this.timeout(120_000);
  const op = useServiceProcess("all");

  it("a bad PORT, HOST or LOG_LEVEL leaves operator commands working and still stops serve, naming the setting", async () => {
    const email = `settings-use-${Math.random().toString(16).slice(2, 8)}@example.com`;
    const created = await runCli(["user", "create", "--email", email], op.env);
    expect(created.code, created.stderr).to.equal(0);
    for (const bad of [{ PORT: "99999" }, { HOST: "0.0.0.0:8080" }, { LOG_LEVEL: "loud" }, { PORT: "http", LOG_LEVEL: "verbose" }] as Record<
      string,
      string
    >[]) {
      const got = await runCli(["user", "get", "--email", email], { ...op.env, ...bad });
      expect([got.code, got.stderr, got.json?.user_id], JSON.stringify(bad)).to.deep.equal([0, "", created.json!.user_id]);
    }
    // serve listens on PORT and logs at LOG_LEVEL: refused before anything starts.
    const port = await runCli(["serve"], { ...op.env, PORT: "99999" });
    expect([port.code, port.stderr]).to.deep.equal([1, "vaultgate: PORT must be an integer from 0 to 65535\n"]);
    const host = await runCli(["serve"], { ...op.env, HOST: "0.0.0.0:8080" });
    expect([host.code, host.stderr]).to.deep.equal([1, "vaultgate: HOST must be a host name or IP address, without a port or brackets (the port is PORT)\n"]);
    const level = await runCli(["serve"], { ...op.env, LOG_LEVEL: "loud" });
    expect([level.code, level.stderr]).to.deep.equal([1, "vaultgate: LOG_LEVEL must be one of fatal, error, warn, info, debug, trace, silent\n"]);
  });

  it("a bad METRICS_PORT, METRICS_HOST or METRICS_TOKEN leaves operator commands working and still stops serve, naming the setting", async () => {
    const cases: [Record<string, string>, string][] = [
      [{ METRICS_PORT: "9464x" }, "METRICS_PORT must be an integer from 0 to 65535"],
      [
        { METRICS_PORT: "0", METRICS_HOST: "127.0.0.1:9464" },
        "METRICS_HOST must be a host name or IP address, without a port or brackets (the port is METRICS_PORT)",
      ],
      [{ METRICS_TOKEN: "short" }, "METRICS_TOKEN must be 16 to 512 printable ASCII characters without spaces"],
      [
        { METRICS_PORT: "0", METRICS_HOST: "0.0.0.0" },
        "METRICS_HOST=0.0.0.0 is not a loopback address: set METRICS_TOKEN so only your scraper can read the metrics, or bind METRICS_HOST=127.0.0.1",
      ],
    ];
    for (const [bad, message] of cases) {
      const listed = await runCli(["partner", "list"], { ...op.env, ...bad });
      expect([listed.code, listed.stderr, Array.isArray(listed.json?.partners)], JSON.stringify(bad)).to.deep.equal([0, "", true]);
      // serve serves the metrics: refused before anything starts.
      const served = await runCli(["serve"], { ...op.env, PORT: "0", CORE_PORT: "0", ...bad });
      expect([served.code, served.stderr], JSON.stringify(bad)).to.deep.equal([1, `vaultgate: ${message}\n`]);
    }
  });

  it("CORE_PORT=0 is refused when dialling core, naming the setting, not reported as an unreachable core", async () => {
    const res = await runCli(["user", "get", "--email", "nobody@example.com"], { ...op.env, CORE_URL: "", CORE_PORT: "0" });
    expect([res.code, res.stdout, res.stderr]).to.deep.equal([
      1,
      "",
      "vaultgate: CORE_PORT=0 cannot be dialled: 0 lets a listening core pick any free port. Set CORE_PORT to the port core listens on, or CORE_URL to its address\n",
    ]);
  });
});
