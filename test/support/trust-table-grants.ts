import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { decodeJwt, type AgentToken, type TestUser } from "./trust.js";
import { bearerMd } from "./grpc-core.js";
import { grpcRefusalOf } from "./refusals.js";

import { admin, agent, session, ok, refused, S, type Ctx, type Entry } from "./trust-cases.js";

/** The response fields the checks below read (see WireResponse in ./trust.ts for how they are decoded). */
type JwksRes = { jwks_json: string };
type SupersededRes = { token: { jti: string } };
type ExchangedRes = { token: { access_token: string } };
type AgentsRes = { agents: { agent_id: string }[] };

const ownerGrant = async (c: Ctx, owner: TestUser) => {
  const t = await c.f.grant(owner);
  return { token: t, agentId: c.f.agentOf(t.accessToken) };
};
const stillActive = async (c: Ctx, token: string) => {
  const res = await c.stack.clients.grants.verifyAgentToken({ accessToken: token });
  expect(res.grant!.grantId).to.equal(decodeJwt(token).payload.jti);
};
/** A client's authorization request naming the owner's vault (wire shape). */
async function authorizationFixture(c: Ctx, owner: TestUser, scope = "accounts:read") {
  const client = await c.f.oauthClient();
  const { request } = c.f.authRequest(client, { scope, vaultId: owner.vaultId });
  return {
    client,
    wire: {
      client_id: request.clientId,
      redirect_uri: request.redirectUri,
      scope: request.scope,
      resources: request.resources,
      code_challenge: request.codeChallenge,
      code_challenge_method: "S256",
      session_token: "",
    },
  };
}

/** Trust table entries of the grants service. */
export const GRANTS_TABLE: Record<string, Entry> = {
  // vaultgate.grants.v1.GrantsService.
  "vaultgate.grants.v1.GrantsService/GetJwks": {
    kind: "public",
    cases: [
      ok("without any credential", async () => ({
        req: {},
        after: (res) => void expect(JSON.parse((res as JwksRes).jwks_json).keys).to.have.length.greaterThan(0),
      })),
    ],
  },
  "vaultgate.grants.v1.GrantsService/RotateSigningKey": admin(() => ({})),
  "vaultgate.grants.v1.GrantsService/RetireSigningKey": admin(async (c) => {
    // Two rotations leave a published key that signed nothing: retiring it strands no token.
    const first = await c.stack.admin.grants.rotateSigningKey({});
    await c.stack.admin.grants.rotateSigningKey({});
    return { kid: first.kid };
  }),
  "vaultgate.grants.v1.GrantsService/VerifyAgentToken": agent((t) => ({ access_token: t })),
  "vaultgate.grants.v1.GrantsService/SupersedeGrant": agent((t) => ({ access_token: t, scope: "" }), {
    after: (c, t) => async (res) => {
      expect((res as SupersededRes).token.jti).to.not.equal(t.grantId);
      const refusal = await grpcRefusalOf(c.core.call("vaultgate.grants.v1.GrantsService", "VerifyAgentToken", { access_token: t.accessToken }));
      expect(refusal.code).to.equal(S.UNAUTHENTICATED);
    },
  }),
  "vaultgate.grants.v1.GrantsService/RevokeAllGrants": agent((t) => ({ access_token: t, reason: "trust boundary" }), {
    after: (c, t) => async (res) => {
      expect(res!.revoked).to.be.at.least(1);
      const refusal = await grpcRefusalOf(c.core.call("vaultgate.grants.v1.GrantsService", "VerifyAgentToken", { access_token: t.accessToken }));
      expect(refusal.code).to.equal(S.UNAUTHENTICATED);
    },
  }),
  "vaultgate.grants.v1.GrantsService/RefreshGrant": {
    kind: "client",
    cases: [
      ok("a client's grant with that client's credentials", async (c) => {
        const client = await c.f.oauthClient();
        const g = await c.f.clientGrant(await c.f.user(), client);
        return { req: { refresh_token: g.refreshToken, client_id: client.clientId, client_secret: client.clientSecret } };
      }),
      ok("a public client's grant with its client id alone", async (c) => {
        const client = await c.f.oauthClient(undefined, { public: true });
        const g = await c.f.clientGrant(await c.f.user(), client);
        return { req: { refresh_token: g.refreshToken, client_id: client.clientId } };
      }),
      refused("a public client's grant by another public client", S.INVALID_ARGUMENT, async (c) => {
        const g = await c.f.clientGrant(await c.f.user(), await c.f.oauthClient(undefined, { public: true }));
        const other = await c.f.oauthClient(undefined, { public: true });
        return { req: { refresh_token: g.refreshToken, client_id: other.clientId }, after: () => stillActive(c, g.accessToken) };
      }),
      ok("an operator-issued grant with the operator credential", async (c) => {
        const g = await c.f.grant(await c.f.user());
        return { req: { refresh_token: g.refreshToken }, md: bearerMd(c.stack.adminToken) };
      }),
      refused("an operator-issued grant without the operator credential", S.UNAUTHENTICATED, async (c) => {
        const g = await c.f.grant(await c.f.user());
        return { req: { refresh_token: g.refreshToken }, after: () => stillActive(c, g.accessToken) };
      }),
      refused("an operator-issued grant with a wrong operator token", S.UNAUTHENTICATED, async (c) => {
        const g = await c.f.grant(await c.f.user());
        return { req: { refresh_token: g.refreshToken }, md: bearerMd(randomBytes(16).toString("hex")), after: () => stillActive(c, g.accessToken) };
      }),
      refused("an operator-issued grant with some client's credentials", S.INVALID_ARGUMENT, async (c) => {
        const g = await c.f.grant(await c.f.user());
        const other = await c.f.oauthClient();
        return { req: { refresh_token: g.refreshToken, client_id: other.clientId, client_secret: other.clientSecret } };
      }),
      refused("a client's grant without client credentials", S.UNAUTHENTICATED, async (c) => {
        const g = await c.f.clientGrant(await c.f.user(), await c.f.oauthClient());
        return { req: { refresh_token: g.refreshToken } };
      }),
      refused("a client's grant with only the operator credential", S.INVALID_ARGUMENT, async (c) => {
        const g = await c.f.clientGrant(await c.f.user(), await c.f.oauthClient());
        return { req: { refresh_token: g.refreshToken }, md: bearerMd(c.stack.adminToken) };
      }),
      refused("a client's grant with a wrong client secret", S.UNAUTHENTICATED, async (c) => {
        const client = await c.f.oauthClient();
        const g = await c.f.clientGrant(await c.f.user(), client);
        return { req: { refresh_token: g.refreshToken, client_id: client.clientId, client_secret: `ags_${randomBytes(32).toString("base64url")}` } };
      }),
      refused("a client's grant with another client's credentials", S.INVALID_ARGUMENT, async (c) => {
        const g = await c.f.clientGrant(await c.f.user(), await c.f.oauthClient());
        const other = await c.f.oauthClient();
        return { req: { refresh_token: g.refreshToken, client_id: other.clientId, client_secret: other.clientSecret } };
      }),
      refused("a forged refresh token", S.INVALID_ARGUMENT, async (c) => ({
        req: { refresh_token: `vgr_${randomBytes(32).toString("base64url")}` },
        md: bearerMd(c.stack.adminToken),
      })),
      refused("a revoked grant's refresh token", S.INVALID_ARGUMENT, async (c) => {
        const g = await c.f.grant(await c.f.user());
        await c.stack.clients.grants.revokeAllGrants({ accessToken: g.accessToken, reason: "test" });
        return { req: { refresh_token: g.refreshToken }, md: bearerMd(c.stack.adminToken) };
      }),
    ],
  },
  "vaultgate.grants.v1.GrantsService/IssueGrant": admin(async (c) => {
    const u = await c.f.user();
    return { user_id: u.userId, vault_id: u.vaultId, scopes: ["accounts:read"] };
  }),
  "vaultgate.grants.v1.GrantsService/RegisterClient": {
    kind: "public",
    cases: [
      ok("without any credential", async () => ({
        req: {
          client_name: "Trust agent",
          redirect_uris: ["http://127.0.0.1:9/callback"],
          grant_types: ["authorization_code", "refresh_token"],
          response_types: ["code"],
          token_endpoint_auth_method: "client_secret_post",
          scope: "accounts:read",
        },
        after: (res) => void expect(res!.client_secret).to.match(/^ags_/),
      })),
    ],
  },
  "vaultgate.grants.v1.GrantsService/CheckAuthorization": {
    kind: "proof",
    cases: [
      ok("public metadata without a session", async (c) => ({ req: (await authorizationFixture(c, await c.f.user())).wire })),
      ok("with the owner's session naming the owner's vault", async (c) => {
        const owner = await c.f.user();
        const { wire } = await authorizationFixture(c, owner);
        return { req: { ...wire, session_token: await c.f.session(owner) }, after: (res) => void expect(res!.vault_id).to.equal(owner.vaultId) };
      }),
      refused("with a random session token", S.UNAUTHENTICATED, async (c) => {
        const { wire } = await authorizationFixture(c, await c.f.user());
        return { req: { ...wire, session_token: `vgs_${randomBytes(32).toString("base64url")}` } };
      }),
      refused("with an ended session", S.UNAUTHENTICATED, async (c) => {
        const owner = await c.f.user();
        const { wire } = await authorizationFixture(c, owner);
        const s = await c.f.session(owner);
        await c.stack.clients.grants.endSession({ sessionToken: s });
        return { req: { ...wire, session_token: s } };
      }),
      refused("with another user's session naming the owner's vault", S.INVALID_ARGUMENT, async (c) => {
        const { wire } = await authorizationFixture(c, await c.f.user());
        return { req: { ...wire, session_token: await c.f.session(await c.f.user()) } };
      }),
    ],
  },
  "vaultgate.grants.v1.GrantsService/ApproveAuthorization": (() => {
    type F = Awaited<ReturnType<typeof authorizationFixture>> & { owner: TestUser };
    const base = session<F>((t, fx) => ({ request: fx.wire, session_token: t, vault_id: fx.owner.vaultId }), {
      setup: async (c, owner) => ({ ...(await authorizationFixture(c, owner, "accounts:read payments:initiate")), owner }),
      stepUp: true,
      // Another user's session cannot pick the owner's vault.
      otherUser: S.INVALID_ARGUMENT,
      missing: S.PERMISSION_DENIED,
      after: (_c, _o, _fx, res) => void expect(res!.code).to.match(/^vgc_/),
    });
    return base;
  })(),
  "vaultgate.grants.v1.GrantsService/ExchangeCode": {
    kind: "client",
    cases: (() => {
      const start = async (c: Ctx, opts: { public?: boolean } = {}) => {
        const client = await c.f.oauthClient(undefined, opts);
        const { code, verifier } = await c.f.authorizationCode(await c.f.user(), client);
        return { client, code, verifier };
      };
      const wire = (x: Awaited<ReturnType<typeof start>>, o: { id?: string; secret?: string; verifier?: string } = {}) => ({
        client_id: o.id ?? x.client.clientId,
        client_secret: o.secret ?? x.client.clientSecret,
        code: x.code,
        redirect_uri: x.client.redirectUri,
        code_verifier: o.verifier ?? x.verifier,
      });
      return [
        ok("with the client's secret, the code and its PKCE verifier", async (c) => ({
          req: wire(await start(c)),
          after: (res) => void expect((res as ExchangedRes).token.access_token).to.be.a("string"),
        })),
        refused("without a client secret", S.UNAUTHENTICATED, async (c) => ({ req: wire(await start(c), { secret: "" }) })),
        refused("with the operator credential and no client secret", S.UNAUTHENTICATED, async (c) => ({
          req: wire(await start(c), { secret: "" }),
          md: bearerMd(c.stack.adminToken),
        })),
        refused("with a wrong client secret", S.UNAUTHENTICATED, async (c) => ({
          req: wire(await start(c), { secret: `ags_${randomBytes(32).toString("base64url")}` }),
        })),
        refused("with another client's credentials", S.INVALID_ARGUMENT, async (c) => {
          const other = await c.f.oauthClient();
          return { req: wire(await start(c), { id: other.clientId, secret: other.clientSecret }) };
        }),
        refused("with a wrong PKCE verifier", S.INVALID_ARGUMENT, async (c) => ({
          req: wire(await start(c), { verifier: randomBytes(32).toString("base64url") }),
        })),
        ok("a public client's code with its client id alone and the PKCE verifier", async (c) => ({
          req: wire(await start(c, { public: true })),
          after: (res) => void expect((res as ExchangedRes).token.access_token).to.be.a("string"),
        })),
        refused("a public client's code with a client secret", S.UNAUTHENTICATED, async (c) => ({
          req: wire(await start(c, { public: true }), { secret: `ags_${randomBytes(32).toString("base64url")}` }),
        })),
        refused("a public client's code by another public client", S.INVALID_ARGUMENT, async (c) => {
          const other = await c.f.oauthClient(undefined, { public: true });
          return { req: wire(await start(c, { public: true }), { id: other.clientId }) };
        }),
        refused("a public client's code without its PKCE verifier", S.INVALID_ARGUMENT, async (c) => ({
          req: wire(await start(c, { public: true }), { verifier: "" }),
        })),
        refused("a code already used", S.INVALID_ARGUMENT, async (c) => {
          const x = await start(c);
          await c.stack.clients.grants.exchangeCode({
            clientId: x.client.clientId,
            clientSecret: x.client.clientSecret,
            code: x.code,
            redirectUri: x.client.redirectUri,
            codeVerifier: x.verifier,
          });
          return { req: wire(x) };
        }),
      ];
    })(),
  },
  "vaultgate.grants.v1.GrantsService/RevokeToken": {
    kind: "client",
    cases: (() => {
      const start = async (c: Ctx, opts: { public?: boolean } = {}) => {
        const client = await c.f.oauthClient(undefined, opts);
        const grant = await c.f.clientGrant(await c.f.user(), client);
        return { client, grant };
      };
      return [
        ok("the client's own token with its secret", async (c) => {
          const x = await start(c);
          return {
            req: { client_id: x.client.clientId, client_secret: x.client.clientSecret, token: x.grant.accessToken },
            after: async () => {
              const refusal = await grpcRefusalOf(c.core.call("vaultgate.grants.v1.GrantsService", "VerifyAgentToken", { access_token: x.grant.accessToken }));
              expect(refusal.code).to.equal(S.UNAUTHENTICATED);
            },
          };
        }),
        refused("without a client secret", S.UNAUTHENTICATED, async (c) => {
          const x = await start(c);
          return { req: { client_id: x.client.clientId, client_secret: "", token: x.grant.accessToken }, after: () => stillActive(c, x.grant.accessToken) };
        }),
        ok("a public client's own token with its client id alone", async (c) => {
          const x = await start(c, { public: true });
          return {
            req: { client_id: x.client.clientId, token: x.grant.accessToken },
            after: async () => {
              const refusal = await grpcRefusalOf(c.core.call("vaultgate.grants.v1.GrantsService", "VerifyAgentToken", { access_token: x.grant.accessToken }));
              expect(refusal.code).to.equal(S.UNAUTHENTICATED);
            },
          };
        }),
        refused("a public client's token by another public client", S.INVALID_ARGUMENT, async (c) => {
          const x = await start(c, { public: true });
          const other = await c.f.oauthClient(undefined, { public: true });
          return { req: { client_id: other.clientId, token: x.grant.accessToken }, after: () => stillActive(c, x.grant.accessToken) };
        }),
        refused("with a wrong client secret", S.UNAUTHENTICATED, async (c) => {
          const x = await start(c);
          return {
            req: { client_id: x.client.clientId, client_secret: `ags_${randomBytes(32).toString("base64url")}`, token: x.grant.accessToken },
            after: () => stillActive(c, x.grant.accessToken),
          };
        }),
        refused("another client's token", S.INVALID_ARGUMENT, async (c) => {
          const x = await start(c);
          const other = await c.f.oauthClient();
          return {
            req: { client_id: other.clientId, client_secret: other.clientSecret, token: x.grant.accessToken },
            after: () => stillActive(c, x.grant.accessToken),
          };
        }),
        refused("an operator-issued grant's token", S.INVALID_ARGUMENT, async (c) => {
          const other = await c.f.oauthClient();
          const g = await c.f.grant(await c.f.user());
          return { req: { client_id: other.clientId, client_secret: other.clientSecret, token: g.accessToken }, after: () => stillActive(c, g.accessToken) };
        }),
      ];
    })(),
  },
  "vaultgate.grants.v1.GrantsService/ListAgents": session((t) => ({ session_token: t }), {
    setup: ownerGrant,
    after: (_c, _o, fx, res) => void expect((res as AgentsRes).agents.map((a) => a.agent_id)).to.include(fx.agentId),
    otherUserOk: (_c, _o, fx, res) => void expect((res as AgentsRes).agents.map((a) => a.agent_id)).to.not.include(fx.agentId),
  }),
  "vaultgate.grants.v1.GrantsService/GetAgent": session((t, fx: { agentId: string }) => ({ session_token: t, agent_id: fx.agentId }), {
    setup: ownerGrant,
    otherUser: S.NOT_FOUND,
  }),
  "vaultgate.grants.v1.GrantsService/RevokeUserGrant": session((t, fx: { token: AgentToken }) => ({ session_token: t, grant_id: fx.token.grantId }), {
    setup: ownerGrant,
    otherUser: S.NOT_FOUND,
    after: async (c, _o, fx) => {
      const refusal = await grpcRefusalOf(c.core.call("vaultgate.grants.v1.GrantsService", "VerifyAgentToken", { access_token: fx.token.accessToken }));
      expect(refusal.code).to.equal(S.UNAUTHENTICATED);
    },
  }),
  "vaultgate.grants.v1.GrantsService/KillSwitch": session((t) => ({ session_token: t }), {
    setup: ownerGrant,
    after: async (c, _o, fx) => {
      const refusal = await grpcRefusalOf(c.core.call("vaultgate.grants.v1.GrantsService", "VerifyAgentToken", { access_token: fx.token.accessToken }));
      expect(refusal.code).to.equal(S.UNAUTHENTICATED);
    },
    otherUserOk: (c, _o, fx) => stillActive(c, fx.token.accessToken),
  }),
  "vaultgate.grants.v1.GrantsService/ListOutbox": admin(() => ({ email: "nobody@example.test" })),
};
