import { expect } from "chai";
import * as oauth from "oauth4webapi";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { startStack, TEST_AUDIENCE, TEST_ISSUER, type TestStack } from "../support/stack.js";
import { createPartner } from "../support/partners.js";
import { thrownBy } from "../support/refusals.js";

/** A real OAuth client library mints partner tokens; jose's remote JWKS verifies them. */
describe("partner tokens with oauth4webapi and jose", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack.close());

  const as = () => ({ issuer: TEST_ISSUER, token_endpoint: `${stack.url}/api/partner/oauth/token` }) satisfies oauth.AuthorizationServer;

  for (const [method, auth] of [
    ["client_secret_basic", oauth.ClientSecretBasic],
    ["client_secret_post", oauth.ClientSecretPost],
  ] as const) {
    it(`mints with ${method} and the token verifies against the published JWKS`, async () => {
      const partner = await createPartner(stack);
      const client: oauth.Client = { client_id: partner.clientId };
      const response = await oauth.clientCredentialsGrantRequest(
        as(),
        client,
        auth(partner.clientSecret),
        { scope: "kyc:read wallet:read" },
        {
          [oauth.allowInsecureRequests]: true,
        },
      );
      const result = await oauth.processClientCredentialsResponse(as(), client, response);
      expect(result.token_type).to.equal("bearer");
      expect(result.expires_in).to.equal(3600);
      expect(result.scope).to.equal("kyc:read wallet:read");

      const jwks = createRemoteJWKSet(new URL(`${stack.url}/.well-known/agent-jwks.json`));
      const { payload, protectedHeader } = await jwtVerify(result.access_token, jwks, {
        algorithms: ["ES256"],
        issuer: TEST_ISSUER,
        audience: TEST_AUDIENCE,
        typ: "at+jwt",
        maxTokenAge: 3600,
        clockTolerance: 30,
        currentDate: stack.clock(),
      });
      expect(protectedHeader.alg).to.equal("ES256");
      expect(payload.sub).to.equal(partner.clientId);
      expect(payload.client_id).to.equal(partner.clientId);
    });
  }

  it("surfaces our flat OAuth errors to the library", async () => {
    const partner = await createPartner(stack);
    const client: oauth.Client = { client_id: partner.clientId };
    const response = await oauth.clientCredentialsGrantRequest(
      as(),
      client,
      oauth.ClientSecretBasic(partner.clientSecret),
      { scope: "treasury:write" },
      {
        [oauth.allowInsecureRequests]: true,
      },
    );
    const err = await thrownBy(oauth.processClientCredentialsResponse(as(), client, response));
    expect(err).to.be.instanceOf(oauth.ResponseBodyError);
    expect((err as oauth.ResponseBodyError).error).to.equal("invalid_scope");
    expect((err as oauth.ResponseBodyError).status).to.equal(400);
  });
});
