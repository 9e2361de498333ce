import { expect } from "chai";
import { decodeProtectedHeader } from "jose";
import { startStack, type TestStack } from "../../support/stack.js";
import { basic, createPartner, postToken } from "../../support/partners.js";
import { expectRefused } from "../../support/refusals.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";

const CC = "grant_type=client_credentials";

/** 503 temporarily_unavailable when signing or audit persistence is unavailable. */
describe("partner token endpoint: unavailable dependencies", () => {
  describe("audit persistence fails", () => {
    let stack: TestStack;
    let failAudit = false;
    before(async () => {
      stack = await startStack({
        gateway: true,
        auditFaults: { appendFault: () => (failAudit ? new Error("disk full") : undefined) },
      });
    });
    after(() => stack.close());

    it("withholds the token with 503 temporarily_unavailable and leaks nothing internal", async () => {
      const partner = await createPartner(stack);
      failAudit = true;
      try {
        const res = await postToken(stack.url, CC, { authorization: basic(partner.clientId, partner.clientSecret) });
        expect(res.status).to.equal(503);
        expect(res.headers.get("cache-control")).to.equal("no-store");
        const text = await res.text();
        expect(JSON.parse(text).error).to.equal("temporarily_unavailable");
        expect(text).to.not.include("access_token");
        expect(text).to.not.include("disk full");
      } finally {
        failAudit = false;
      }
      // The same request succeeds once audit writes work again.
      const retry = await postToken(stack.url, CC, { authorization: basic(partner.clientId, partner.clientSecret) });
      expect(retry.status).to.equal(200);
    });
  });

  for (const [label, signingKey] of [
    ["not JSON or PEM", "definitely-not-a-key"],
    ["a JWK without the private part", JSON.stringify({ kty: "EC", crv: "P-256", x: "x", y: "y" })],
    ["an RSA key", "-----BEGIN PRIVATE KEY-----\nMIIBVQIBADANBgkqhkiG9w0BAQEFAASCAT8wggE7AgEAAkEA\n-----END PRIVATE KEY-----"],
    ["empty", ""],
  ] as const) {
    describe(`SIGNING_KEY is ${label}`, () => {
      let stack: TestStack;
      before(async () => {
        stack = await startStack({ gateway: true, signingKey });
      });
      after(() => stack.close());

      it("starts anyway, answers the token endpoint with 503 and reports not ready", async () => {
        const partner = await createPartner(stack);
        const res = await postToken(stack.url, CC, { authorization: basic(partner.clientId, partner.clientSecret) });
        expect(res.status).to.equal(503);
        expect(((await res.json()) as { error: string }).error).to.equal("temporarily_unavailable");
        const ready = await fetch(`${stack.url}/readyz`);
        expect(ready.status).to.equal(503);
        expect((await fetch(`${stack.url}/healthz`)).status).to.equal(200);
        expect(stack.logs.text()).to.not.include(signingKey || "never-matches-anything");
      });
    });
  }

  describe("key rotation", () => {
    let stack: TestStack;
    before(async () => {
      stack = await startStack({ gateway: true });
    });
    after(() => stack.close());

    it("signs with the new key and keeps the old public key published", async () => {
      const partner = await createPartner(stack);
      const mint = async () => {
        const res = await postToken(stack.url, CC, { authorization: basic(partner.clientId, partner.clientSecret) });
        return ((await res.json()) as { access_token: string }).access_token;
      };
      const oldKid = decodeProtectedHeader(await mint()).kid!;
      const rotated = await stack.admin.grants.rotateSigningKey({});
      expect(rotated.kid).to.not.equal(oldKid);
      expect(decodeProtectedHeader(await mint()).kid).to.equal(rotated.kid);
      const jwks = (await (await fetch(`${stack.url}/.well-known/agent-jwks.json`)).json()) as { keys: { kid: string; d?: string }[] };
      const kids = jwks.keys.map((k) => k.kid);
      expect(kids).to.include(oldKid);
      expect(kids).to.include(rotated.kid);
      expect(jwks.keys.every((k) => k.d === undefined)).to.equal(true);
    });

    it("refuses rotation without the operator credential", async () => {
      await expectRefused(stack.clients.grants.rotateSigningKey({}), Reason.ADMIN_UNAUTHENTICATED, /operator credential required/);
    });
  });
});
