import { expect } from "chai";
import * as oauth from "oauth4webapi";
import { startStack, type TestStack } from "../support/stack.js";
import { authorize, createJar, createUser, oauthGrant, vaultUrn } from "../support/agent-oauth.js";
import { expectRefused, thrownBy } from "../support/refusals.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";

/**
 * A real third-party client (panva's oauth4webapi) runs the whole agent flow against
 * the gateway: discovery, registration, authorize with PKCE (sign-in and consent driven
 * over HTTP), code exchange, refresh and revocation.
 */
describe("oauth4webapi against the agent authorization server", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  for (const method of ["client_secret_post", "client_secret_basic"] as const) {
    it(`runs discovery, registration, PKCE authorize, exchange, refresh and revocation (${method})`, async () => {
      const http = { [oauth.allowInsecureRequests]: true };
      const issuer = new URL(stack.url);
      const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { ...http, algorithm: "oauth2" }));
      expect(as.code_challenge_methods_supported).to.deep.equal(["S256"]);

      const redirectUri = "http://127.0.0.1:9/cb";
      const registered = await oauth.processDynamicClientRegistrationResponse(
        await oauth.dynamicClientRegistrationRequest(
          as,
          {
            client_name: "oauth4webapi agent",
            redirect_uris: [redirectUri],
            grant_types: ["authorization_code", "refresh_token"],
            response_types: ["code"],
            token_endpoint_auth_method: method,
            scope: "accounts:read audit:stream",
          },
          http,
        ),
      );
      const client: oauth.Client = { client_id: registered.client_id, token_endpoint_auth_method: method };
      const secret = registered.client_secret as string;
      const auth = method === "client_secret_post" ? oauth.ClientSecretPost(secret) : oauth.ClientSecretBasic(secret);

      const user = await createUser(stack);
      const resource = `urn:vaultgate:vault:${user.vaultId}`;
      const verifier = oauth.generateRandomCodeVerifier();
      const state = oauth.generateRandomState();
      const url = new URL(as.authorization_endpoint!);
      url.search = new URLSearchParams({
        response_type: "code",
        client_id: client.client_id,
        redirect_uri: redirectUri,
        code_challenge: await oauth.calculatePKCECodeChallenge(verifier),
        code_challenge_method: "S256",
        scope: "accounts:read audit:stream",
        resource,
        state,
      }).toString();
      const callback = await authorize(stack, createJar(stack.url), user.email, Object.fromEntries(url.searchParams));

      // Checks state and the RFC 9207 iss against the discovered issuer.
      const params = oauth.validateAuthResponse(as, client, callback, state);
      const tokens = await oauth.processAuthorizationCodeResponse(
        as,
        client,
        await oauth.authorizationCodeGrantRequest(as, client, auth, params, redirectUri, verifier, { ...http, additionalParameters: { resource } }),
      );
      expect(tokens.token_type).to.equal("bearer");
      expect(tokens.expires_in).to.equal(3600);
      expect(tokens.scope).to.equal("accounts:read audit:stream");
      expect(tokens.jti).to.be.a("string");
      expect(tokens.refresh_token).to.match(/^vgr_/);

      // The access token verifies with the published JWKS through jose's remote set.
      const { createRemoteJWKSet, jwtVerify } = await import("jose");
      const jwks = createRemoteJWKSet(new URL(as.jwks_uri!));
      const { payload, protectedHeader } = await jwtVerify(tokens.access_token, jwks, {
        algorithms: ["ES256"],
        issuer: stack.url,
        audience: stack.url,
        typ: "at+jwt",
        currentDate: stack.clock(),
      });
      expect(protectedHeader.typ).to.equal("at+jwt");
      expect(payload.aud).to.deep.equal([stack.url, resource]);

      const refreshed = await oauth.processRefreshTokenResponse(
        as,
        client,
        await oauth.refreshTokenGrantRequest(as, client, auth, tokens.refresh_token!, http),
      );
      expect(refreshed.jti).to.not.equal(tokens.jti);
      expect(refreshed.refresh_token).to.not.equal(tokens.refresh_token);

      await oauth.processRevocationResponse(await oauth.revocationRequest(as, client, auth, refreshed.refresh_token!, http));
      await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: refreshed.access_token }), Reason.INVALID_TOKEN);
      await oauth.processRefreshTokenResponse(as, client, await oauth.refreshTokenGrantRequest(as, client, auth, refreshed.refresh_token!, http)).then(
        () => expect.fail("refresh after revocation must fail"),
        (err: unknown) => {
          expect(err).to.be.instanceOf(oauth.ResponseBodyError);
          expect((err as oauth.ResponseBodyError).error).to.equal("invalid_grant");
        },
      );
    });
  }
  it("refreshes with a narrower scope and the grant's resource; a wider scope is invalid_scope, another vault invalid_target", async () => {
    const http = { [oauth.allowInsecureRequests]: true };
    const issuer = new URL(stack.url);
    const as = await oauth.processDiscoveryResponse(issuer, await oauth.discoveryRequest(issuer, { ...http, algorithm: "oauth2" }));
    const { token, client: registered, user } = await oauthGrant(stack, { scope: "accounts:read audit:stream" });
    const client: oauth.Client = { client_id: registered.client_id, token_endpoint_auth_method: "client_secret_basic" };
    const auth = oauth.ClientSecretBasic(registered.client_secret);
    const refresh = (refreshToken: string, additionalParameters: Record<string, string>) =>
      oauth
        .refreshTokenGrantRequest(as, client, auth, refreshToken, { ...http, additionalParameters })
        .then((res) => oauth.processRefreshTokenResponse(as, client, res));
    const refusal = async (call: Promise<unknown>) => {
      const err = await thrownBy(call);
      expect(err).to.be.instanceOf(oauth.ResponseBodyError);
      return (err as oauth.ResponseBodyError).error;
    };
    const rt = token.body.refresh_token as string;
    expect(await refusal(refresh(rt, { scope: "accounts:read payments:initiate" }))).to.equal("invalid_scope");
    expect(await refusal(refresh(rt, { resource: vaultUrn((await createUser(stack)).vaultId) }))).to.equal("invalid_target");
    const narrow = await refresh(rt, { scope: "audit:stream", resource: vaultUrn(user.vaultId) });
    expect(narrow.scope).to.equal("audit:stream");
    const whole = await refresh(narrow.refresh_token!, {});
    expect(whole.scope).to.equal("accounts:read audit:stream");
  });
});
