import { stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { expect } from "chai";
import { ConfigError, loadConfig } from "../../cli/config.js";
import { loadCoreDial, loadCoreServerTls } from "../../cli/core-tls.js";
import { ensureGatewayToken } from "../../cli/admin-token.js";
import { makeTestCerts, type TestCerts } from "../support/certs.js";
import { tempDataDir } from "../support/process.js";
import { thrownNow } from "../support/refusals.js";

/** Core's TLS settings: each bad one is refused at start, naming its variable. */
describe("core TLS settings", function () {
  this.timeout(120_000);
  let certs: TestCerts;

  before(async () => {
    certs = await makeTestCerts();
  });
  after(async () => {
    await certs?.remove();
  });

  describe("bad TLS settings name their variable", () => {
    it("reports missing, unreadable, non-PEM and mismatched files without showing their contents", async () => {
      const junk = join(certs.dir, "junk.pem");
      await writeFile(junk, "not a certificate\n");
      const bad = (env: Record<string, string>) => () => loadCoreServerTls(loadConfig(env));
      const pair = { CORE_TLS_CERT: certs.files.serverCert, CORE_TLS_KEY: certs.files.serverKey };
      expect(() => loadConfig({ CORE_TLS_CERT: certs.files.serverCert })).to.throw(ConfigError, /CORE_TLS_CERT and CORE_TLS_KEY must be set together/);
      expect(() => loadConfig({ CORE_TLS_CLIENT_KEY: certs.files.clientKey })).to.throw(ConfigError, /CORE_TLS_CLIENT_CERT and CORE_TLS_CLIENT_KEY/);
      expect(bad({ ...pair, CORE_TLS_CERT: join(certs.dir, "absent.pem") })).to.throw(ConfigError, /^CORE_TLS_CERT: cannot read .*absent\.pem \(ENOENT\)$/);
      expect(bad({ ...pair, CORE_TLS_CERT: junk })).to.throw(ConfigError, /^CORE_TLS_CERT: .* is not a PEM file$/);
      expect(bad({ ...pair, CORE_TLS_CERT: certs.files.serverKey })).to.throw(ConfigError, /^CORE_TLS_CERT must hold a PEM X\.509 certificate$/);
      expect(bad({ ...pair, CORE_TLS_KEY: certs.files.serverCert })).to.throw(ConfigError, /^CORE_TLS_KEY must hold an unencrypted PEM private key$/);
      expect(bad({ ...pair, CORE_TLS_KEY: certs.files.clientKey })).to.throw(
        ConfigError,
        /^CORE_TLS_KEY is not the private key of the certificate in CORE_TLS_CERT$/,
      );
      expect(bad({ ...pair, CORE_TLS_CA: junk })).to.throw(ConfigError, /^CORE_TLS_CA: /);
      expect(bad({ ...pair, CORE_TLS_CA: certs.files.serverKey })).to.throw(ConfigError, /^CORE_TLS_CA must hold one or more PEM CA certificates$/);
      expect(bad({ CORE_TLS_CA: certs.files.ca })).to.throw(ConfigError, /^CORE_TLS_CA needs CORE_TLS_CERT and CORE_TLS_KEY on a process that serves core/);
      const dial = (env: Record<string, string>) => () => loadCoreDial(loadConfig(env), "https://127.0.0.1:8081");
      expect(dial({ CORE_TLS_CLIENT_CERT: certs.files.clientCert, CORE_TLS_CLIENT_KEY: certs.files.serverKey })).to.throw(
        ConfigError,
        /^CORE_TLS_CLIENT_KEY is not the private key/,
      );
      expect(dial({ CORE_TLS_CA: junk })).to.throw(ConfigError, /^CORE_TLS_CA: /);
      expect(() => loadConfig({ CORE_ALLOW_CLEARTEXT: "yes" })).to.throw(ConfigError, /^CORE_ALLOW_CLEARTEXT must be true or false$/);
      // Never a byte of key material in a message.
      for (const fn of [bad({ ...pair, CORE_TLS_KEY: certs.files.serverCert }), bad({ ...pair, CORE_TLS_CERT: certs.files.serverKey })]) {
        expect((thrownNow(fn) as Error).message).to.not.include("BEGIN");
      }
    });

    it("GATEWAY_TOKEN must be a header-safe secret of at least 16 characters", () => {
      expect(() => loadConfig({ GATEWAY_TOKEN: "short" })).to.throw(ConfigError, /^GATEWAY_TOKEN must be 16 to 512 printable ASCII characters without spaces$/);
      expect(() => loadConfig({ GATEWAY_TOKEN: "has a space in the middle" })).to.throw(ConfigError, /GATEWAY_TOKEN/);
      expect(loadConfig({ GATEWAY_TOKEN: "a".repeat(16) }).gatewayToken).to.equal("a".repeat(16));
    });

    it("generates the gateway token once into DATA_DIR/gateway-token, readable only by its owner", async () => {
      const dir = await tempDataDir();
      try {
        const first = await ensureGatewayToken(dir.path, undefined);
        expect(first).to.match(/^[A-Za-z0-9_-]{43}$/);
        expect(await ensureGatewayToken(dir.path, undefined)).to.equal(first);
        expect((await stat(join(dir.path, "gateway-token"))).mode & 0o777).to.equal(0o600);
        expect(await ensureGatewayToken(dir.path, "from-the-environment-123")).to.equal("from-the-environment-123");
      } finally {
        await dir.remove();
      }
    });
  });
});
