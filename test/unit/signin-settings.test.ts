import { expect } from "chai";
import { loadConfig, ConfigError } from "../../cli/config.js";
import { thrownNow } from "../support/refusals.js";

const oidc = { OIDC_ISSUER: "https://idp.example.com", OIDC_CLIENT_ID: "vaultgate", OIDC_CLIENT_SECRET: "s3cret-value" };

describe("sign-in settings", () => {
  it("defaults to e-mail codes in the dev outbox, and to the provider when one is set", () => {
    const plain = loadConfig({});
    expect(plain.signinMethods).to.deep.equal(["email"]);
    expect(plain.smtp).to.equal(undefined);
    expect(loadConfig(oidc).signinMethods).to.deep.equal(["oidc"]);
  });

  it("reads SMTP_URL with MAIL_FROM, and OIDC_STEP_UP_ACR as a list", () => {
    const c = loadConfig({
      SMTP_URL: "smtps://user:pw@mail.example.com:465",
      MAIL_FROM: "Vaultgate <no-reply@example.com>",
      ...oidc,
      OIDC_STEP_UP_ACR: "phr, mfa",
      SIGNIN_METHODS: "oidc,passkey,email",
      APP_URL: "https://app.example.com",
      AUTH_URL: "https://app.example.com",
    });
    expect(c.smtp).to.deep.equal({ url: "smtps://user:pw@mail.example.com:465", from: "Vaultgate <no-reply@example.com>" });
    expect(c.oidc?.stepUpAcr).to.deep.equal(["phr", "mfa"]);
    expect(c.signinMethods).to.deep.equal(["oidc", "passkey", "email"]);
  });

  it("limits sign-in flow starts to 30 a minute per client address unless SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE says otherwise", () => {
    expect(loadConfig({}).signinFlowStartsPerMinute).to.equal(30);
    expect(loadConfig({ SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE: "300" }).signinFlowStartsPerMinute).to.equal(300);
  });

  const refused: [Record<string, string>, RegExp][] = [
    [{ SMTP_URL: "smtp://mail.example.com" }, /together/],
    [{ SMTP_URL: "https://mail.example.com", MAIL_FROM: "a@example.com" }, /smtp:\/\/ .*smtps:\/\//],
    [{ SMTP_URL: "smtp://mail.example.com", MAIL_FROM: "not an address" }, /MAIL_FROM/],
    [{ SMTP_URL: "smtp://u:pw@mail.example.com?logger=true", MAIL_FROM: "a@example.com" }, /SMTP_URL takes no query parameter but starttls/],
    [{ OIDC_ISSUER: "https://idp.example.com" }, /set together/],
    [{ ...oidc, OIDC_ISSUER: "http://idp.example.com" }, /https/],
    [{ OIDC_STEP_UP_ACR: "mfa" }, /needs OIDC_ISSUER/],
    [{ SIGNIN_METHODS: "passkey" }, /email or oidc/],
    [{ SIGNIN_METHODS: "email,sms" }, /comma-separated list/],
    [{ SIGNIN_METHODS: "oidc" }, /set OIDC_ISSUER/],
    [{ ...oidc, SIGNIN_METHODS: "email" }, /does not offer oidc/],
    [{ SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE: "0" }, /SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE/],
    [{ SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE: "many" }, /SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE/],
  ];
  for (const [env, message] of refused) {
    it(`refuses ${JSON.stringify(env)} at start, naming the setting and never a secret`, () => {
      const err = thrownNow(() => loadConfig(env));
      expect(err).to.be.instanceOf(ConfigError);
      expect((err as Error).message).to.match(message);
      expect((err as Error).message).not.to.include("s3cret-value");
    });
  }
});
