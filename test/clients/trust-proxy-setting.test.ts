import { expect } from "chai";
import { ConfigError, loadConfig } from "../../cli/config.js";
import { runCli, tempDataDir } from "../support/process.js";

/** TRUST_PROXY: off by default; a hop count or a list of addresses and CIDRs; anything else refuses to start. */
describe("TRUST_PROXY setting", function () {
  this.timeout(60_000);

  it("is off unless set, and takes a hop count or IPv4/IPv6 addresses and CIDRs", () => {
    expect(loadConfig({}).trustProxy).to.equal(false);
    expect(loadConfig({ TRUST_PROXY: "" }).trustProxy).to.equal(false);
    expect(loadConfig({ TRUST_PROXY: "false" }).trustProxy).to.equal(false);
    expect(loadConfig({ TRUST_PROXY: "0" }).trustProxy).to.equal(false);
    expect(loadConfig({ TRUST_PROXY: "2" }).trustProxy).to.equal(2);
    expect(loadConfig({ TRUST_PROXY: "10.0.0.0/8, 192.168.1.7,fd00::/8 ,::1" }).trustProxy).to.deep.equal(["10.0.0.0/8", "192.168.1.7", "fd00::/8", "::1"]);
  });

  it("refuses anything else, naming the setting", () => {
    for (const bad of [
      "true",
      "yes",
      "loopback",
      "10.0.0.0/33",
      "fd00::/129",
      "10.0.0/8",
      "10.0.0.0/",
      "10.0.0.0/8,",
      "999",
      "-1",
      "1.5",
      "example.com",
      "10.0.0.0/8;rm",
    ]) {
      expect(() => loadConfig({ TRUST_PROXY: bad }), bad).to.throw(ConfigError, /^TRUST_PROXY must be a hop count/);
    }
  });

  it("vaultgate serve with a bad TRUST_PROXY exits 1 and says so, without a stack trace", async () => {
    const dir = await tempDataDir();
    try {
      const res = await runCli(["serve"], { DATA_DIR: dir.path, TRUST_PROXY: "everyone", PORT: "0", CORE_PORT: "0" });
      expect(res.code).to.equal(1);
      expect(res.stderr).to.include("TRUST_PROXY must be a hop count");
      expect(res.stderr).to.not.match(/\n\s+at /);
    } finally {
      await dir.remove();
    }
  });
});
