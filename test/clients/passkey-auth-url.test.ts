import { expect } from "chai";
import { ConfigError, loadConfig } from "../../cli/config.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { runCli, tempDataDir } from "../support/process.js";
import { expectRefused } from "../support/refusals.js";
import { softPasskey } from "../support/soft-passkey.js";
import { startStack } from "../support/stack.js";
import { fixtures } from "../support/trust.js";

/**
 * Passkeys are bound to APP_URL's host, and the consent page (AUTH_URL) steps up with them:
 * a start whose AUTH_URL the passkeys cannot cover is refused naming the settings, and a
 * consent page under APP_URL's host can use them.
 */
describe("passkeys and AUTH_URL", function () {
  this.timeout(120_000);

  it("refuses to start with passkey offered and AUTH_URL on a host APP_URL's passkeys do not cover", () => {
    for (const AUTH_URL of ["https://auth.other.example", "https://example.com.evil.test", "https://badexample.com"]) {
      expect(() => loadConfig({ SIGNIN_METHODS: "email,passkey", APP_URL: "https://example.com", AUTH_URL }), AUTH_URL).to.throw(
        ConfigError,
        /SIGNIN_METHODS has passkey, but AUTH_URL's host .* APP_URL's host example\.com/,
      );
    }
    // The same host, a subdomain, or no passkeys at all: nothing to refuse.
    for (const AUTH_URL of ["https://example.com:8443", "https://auth.example.com"])
      expect(loadConfig({ SIGNIN_METHODS: "email,passkey", APP_URL: "https://example.com", AUTH_URL }).authUrl).to.equal(AUTH_URL);
    expect(loadConfig({ SIGNIN_METHODS: "email", APP_URL: "https://example.com", AUTH_URL: "https://auth.other.example" }).authUrl).to.equal(
      "https://auth.other.example",
    );
  });

  it("vaultgate serve exits 1 naming the settings, without a stack trace", async () => {
    const dir = await tempDataDir();
    try {
      const res = await runCli(["serve"], {
        DATA_DIR: dir.path,
        PORT: "0",
        CORE_PORT: "0",
        SIGNIN_METHODS: "email,passkey",
        APP_URL: "https://app.example.com",
        AUTH_URL: "https://login.example.org",
      });
      expect(res.code).to.equal(1);
      expect(res.stderr).to.match(/SIGNIN_METHODS has passkey, but AUTH_URL's host login\.example\.org .*APP_URL's host app\.example\.com/);
      expect(res.stderr).to.not.match(/\n\s+at /);
    } finally {
      await dir.remove();
    }
  });

  it("vaultgate serve exits 1 when browsers would never run a passkey on the pages: an IP address, or plain http off localhost", async () => {
    const dir = await tempDataDir();
    try {
      const cases: [Record<string, string>, RegExp][] = [
        [{}, /APP_URL's host 127\.0\.0\.1 is an IP address/],
        [{ APP_URL: "https://[2001:db8::1]", AUTH_URL: "https://[2001:db8::1]" }, /APP_URL's host \[2001:db8::1\] is an IP address/],
        [{ APP_URL: "http://app.example.com", AUTH_URL: "http://app.example.com" }, /APP_URL is plain http on app\.example\.com/],
        [{ APP_URL: "https://example.com", AUTH_URL: "http://auth.example.com" }, /AUTH_URL is plain http on auth\.example\.com/],
      ];
      for (const [urls, message] of cases) {
        const res = await runCli(["serve"], { DATA_DIR: dir.path, PORT: "0", CORE_PORT: "0", SIGNIN_METHODS: "email,passkey", ...urls });
        expect(res.code, JSON.stringify(urls)).to.equal(1);
        expect(res.stderr).to.match(message);
        expect(res.stderr).to.match(/leave passkey out of SIGNIN_METHODS/);
        expect(res.stderr).to.not.match(/\n\s+at /);
      }
    } finally {
      await dir.remove();
    }
    // Development on localhost, and https under a domain name, can use passkeys.
    for (const url of ["http://localhost:8080", "http://vaultgate.localhost", "https://example.com"])
      expect(loadConfig({ SIGNIN_METHODS: "email,passkey", APP_URL: url, AUTH_URL: url }).signinMethods).to.include("passkey");
  });

  it("a consent page on a subdomain of APP_URL's host can step up with the passkey; another host cannot", async () => {
    const stack = await startStack({ appUrl: "https://example.test", authUrl: "https://auth.example.test" });
    try {
      const f = fixtures(stack);
      const user = await f.user();
      const key = softPasskey();
      const added = await f.steppedUpSession(user);
      const r = await stack.clients.grants.startPasskeyRegistration({ sessionToken: added });
      await stack.clients.grants.finishPasskeyRegistration({
        sessionToken: added,
        flowSecret: r.flowSecret,
        responseJson: key.create(r.optionsJson, "https://example.test"),
        name: "phone",
      });

      const sessionToken = await f.session(user);
      const elsewhere = await stack.clients.grants.startPasskeyAssertion({ sessionToken });
      await expectRefused(
        stack.clients.grants.finishPasskeyAssertion({
          sessionToken,
          flowSecret: elsewhere.flowSecret,
          responseJson: key.get(elsewhere.optionsJson, "https://evil.example.test.org"),
        }),
        Reason.ACCESS_DENIED,
      );
      const s = await stack.clients.grants.startPasskeyAssertion({ sessionToken });
      await stack.clients.grants.finishPasskeyAssertion({
        sessionToken,
        flowSecret: s.flowSecret,
        responseJson: key.get(s.optionsJson, "https://auth.example.test"),
      });
      expect((await stack.clients.grants.getSession({ sessionToken })).session!.stepUpFresh).to.equal(true);
    } finally {
      await stack.close();
    }
  });
});
