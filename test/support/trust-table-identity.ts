import { randomBytes } from "node:crypto";
import { expect } from "chai";
import type { TestUser } from "./trust.js";
import { grpcRefusalOf } from "./refusals.js";
import { softPasskey } from "./soft-passkey.js";
import { session, ok, refused, S, type Ctx, type Entry } from "./trust-cases.js";
import { decodeJwt, forgeWithFreshKey, resignWithRealKey, unsignedCopy } from "./trust.js";

/** The response fields the checks below read (see WireResponse in ./trust.ts for how they are decoded). */
type OidcStartRes = { authorization_url: string };
type SessionRes = { session: { user_id: string } };
type PasskeyOptionsRes = { options_json: string };
type PasskeyRes = { passkey: { name: string } };
type PasskeysRes = { passkeys: { passkey_id: string }[] };
type HandoffRes = { signout_handoff: string };

/** A passkey registered for the owner through the RPCs (software authenticator at the app's origin). */
const ownerPasskey = async (c: Ctx, owner: TestUser) => {
  const origin = new URL(c.stack.issuer).origin;
  const key = softPasskey();
  const sessionToken = await c.f.steppedUpSession(owner);
  const s = await c.stack.clients.grants.startPasskeyRegistration({ sessionToken });
  const r = await c.stack.clients.grants.finishPasskeyRegistration({
    sessionToken,
    flowSecret: s.flowSecret,
    responseJson: key.create(s.optionsJson, origin),
    name: "laptop",
  });
  return { key, origin, passkeyId: r.passkey!.passkeyId };
};

/** A sign-out handoff naming `owner`, from ending another of their sessions. */
const handoffFor = async (c: Ctx, owner: TestUser) => (await c.stack.clients.grants.endSession({ sessionToken: await c.f.session(owner) })).signoutHandoff;

/** ContinueSignOut: the session is checked like every other, and the handoff must be core's, live, and name its user. */
function continueSignOutEntry(): Entry {
  const ended = async (c: Ctx, token: string) => {
    const refusal = await grpcRefusalOf(c.core.call("vaultgate.grants.v1.GrantsService", "GetSession", { session_token: token }));
    expect(refusal.code).to.equal(S.UNAUTHENTICATED);
  };
  const base = session((t, handoff: string) => ({ session_token: t, signout_handoff: handoff }), {
    setup: handoffFor,
    otherUser: S.PERMISSION_DENIED,
    after: (c, _o, _fx, _res, token) => ended(c, token),
  });
  const badHandoff = (name: string, make: (c: Ctx, handoff: string) => Promise<string> | string) =>
    refused(`with the owner's session and ${name}`, S.INVALID_ARGUMENT, async (c) => {
      const owner = await c.f.user();
      const token = await c.f.session(owner);
      const handoff = await make(c, await handoffFor(c, owner));
      return {
        req: { session_token: token, signout_handoff: handoff },
        after: async () => void (await c.stack.clients.grants.getSession({ sessionToken: token })),
      };
    });
  const now = (c: Ctx) => Math.floor(c.stack.clock().getTime() / 1000);
  return {
    kind: "session",
    cases: [
      ...base.cases,
      badHandoff("no handoff", () => ""),
      badHandoff("a random string as handoff", () => randomBytes(24).toString("base64url")),
      badHandoff("a forged handoff (a fresh P-256 key signs the real kid and claims)", (_c, h) => forgeWithFreshKey(h)),
      badHandoff("an unsigned handoff (alg none)", (_c, h) => unsignedCopy(h)),
      badHandoff("an agent access token as handoff", async (c) => (await c.f.grant(await c.f.user(), { stepUp: true })).accessToken),
      badHandoff("a handoff re-signed by the real key as an access token (typ at+jwt)", (c, h) => resignWithRealKey(c.stack, h, {}, { typ: "at+jwt" })),
      badHandoff("a handoff re-signed by the real key for another audience", (c, h) => resignWithRealKey(c.stack, h, { aud: c.stack.mcpUrl })),
      badHandoff("a handoff re-signed by the real key, expired two minutes ago", (c, h) =>
        resignWithRealKey(c.stack, h, { iat: now(c) - 180, exp: now(c) - 120 }),
      ),
      badHandoff("a handoff re-signed by the real key to live an hour", (c, h) =>
        resignWithRealKey(c.stack, h, { exp: (decodeJwt(h).payload.iat as number) + 3600 }),
      ),
    ],
  };
}

/** Trust table entries of the grants service's sign-in, session and passkey RPCs. */
export const IDENTITY_TABLE: Record<string, Entry> = {
  "vaultgate.grants.v1.GrantsService/StartSignIn": {
    kind: "proof",
    cases: [
      ok("sign-in: an e-mail address", async (c) => ({ req: { email: (await c.f.user()).email } })),
      ok("step-up: the user's session", async (c) => ({ req: { session_token: await c.f.session(await c.f.user()) } })),
      refused("step-up: a random session token", S.UNAUTHENTICATED, async () => ({ req: { session_token: `vgs_${randomBytes(32).toString("base64url")}` } })),
      refused("step-up: an ended session", S.UNAUTHENTICATED, async (c) => {
        const s = await c.f.session(await c.f.user());
        await c.stack.clients.grants.endSession({ sessionToken: s });
        return { req: { session_token: s } };
      }),
      refused("sign-in: not an e-mail address", S.INVALID_ARGUMENT, async () => ({ req: { email: "not-an-address" } })),
    ],
  },
  "vaultgate.grants.v1.GrantsService/CompleteSignIn": {
    kind: "proof",
    cases: [
      ok("sign-in: the e-mailed code", async (c) => {
        const u = await c.f.user();
        const { challengeId } = await c.stack.clients.grants.startSignIn({ email: u.email });
        return { req: { challenge_id: challengeId, code: await c.f.code(u.email) }, after: (res) => void expect(res!.session_token).to.match(/^vgs_/) };
      }),
      ok("step-up: the e-mailed code with the session", async (c) => {
        const u = await c.f.user();
        const s = await c.f.session(u);
        const { challengeId } = await c.stack.clients.grants.startSignIn({ sessionToken: s });
        return {
          req: { challenge_id: challengeId, code: await c.f.code(u.email), session_token: s },
          after: async () => void expect((await c.stack.clients.grants.getSession({ sessionToken: s })).session!.stepUpFresh).to.equal(true),
        };
      }),
      refused("sign-in: a wrong code", S.INVALID_ARGUMENT, async (c) => {
        const u = await c.f.user();
        const { challengeId } = await c.stack.clients.grants.startSignIn({ email: u.email });
        const right = await c.f.code(u.email);
        return { req: { challenge_id: challengeId, code: right === "000000" ? "000001" : "000000" } };
      }),
      refused("sign-in: another user's code", S.INVALID_ARGUMENT, async (c) => {
        const a = await c.f.user();
        const b = await c.f.user();
        const { challengeId } = await c.stack.clients.grants.startSignIn({ email: a.email });
        const aCode = await c.f.code(a.email);
        await c.stack.clients.grants.startSignIn({ email: b.email });
        const bCode = await c.f.code(b.email);
        return { req: { challenge_id: challengeId, code: bCode === aCode ? String((Number(aCode) + 1) % 1e6).padStart(6, "0") : bCode } };
      }),
      refused("step-up: the code without the session", S.INVALID_ARGUMENT, async (c) => {
        const u = await c.f.user();
        const s = await c.f.session(u);
        const { challengeId } = await c.stack.clients.grants.startSignIn({ sessionToken: s });
        return {
          req: { challenge_id: challengeId, code: await c.f.code(u.email) },
          after: async () => void expect((await c.stack.clients.grants.getSession({ sessionToken: s })).session!.stepUpFresh).to.equal(false),
        };
      }),
      refused("step-up: the owner's code with another user's session", S.INVALID_ARGUMENT, async (c) => {
        const u = await c.f.user();
        const s = await c.f.session(u);
        const other = await c.f.session(await c.f.user());
        const { challengeId } = await c.stack.clients.grants.startSignIn({ sessionToken: s });
        return {
          req: { challenge_id: challengeId, code: await c.f.code(u.email), session_token: other },
          after: async () => void expect((await c.stack.clients.grants.getSession({ sessionToken: other })).session!.stepUpFresh).to.equal(false),
        };
      }),
      refused("step-up: a random session token", S.UNAUTHENTICATED, async (c) => {
        const u = await c.f.user();
        const { challengeId } = await c.stack.clients.grants.startSignIn({ sessionToken: await c.f.session(u) });
        return { req: { challenge_id: challengeId, code: await c.f.code(u.email), session_token: `vgs_${randomBytes(32).toString("base64url")}` } };
      }),
    ],
  },
  // The flow secret (the browser's cookie) and the provider's signed answer are the proof.
  "vaultgate.grants.v1.GrantsService/StartProviderSignIn": {
    kind: "proof",
    cases: [
      ok("sign-in: no credential; the browser is sent to the provider", async (c) => ({
        req: {},
        after: (res) => void expect((res as OidcStartRes).authorization_url.startsWith(c.idp.issuer)).to.equal(true),
      })),
      refused("step-up: a random session token", S.UNAUTHENTICATED, async () => ({ req: { session_token: `vgs_${randomBytes(32).toString("base64url")}` } })),
    ],
  },
  "vaultgate.grants.v1.GrantsService/CompleteProviderSignIn": {
    kind: "proof",
    cases: [
      ok("the provider's redirect with the flow secret", async (c) => {
        const u = await c.f.user();
        const sub = `tb-${randomBytes(4).toString("hex")}`;
        await c.idp.addAccount({ sub, email: u.email, email_verified: true });
        const s = await c.stack.clients.grants.startProviderSignIn({});
        return {
          req: { callback_url: await c.idp.signIn(s.authorizationUrl, sub), flow_secret: s.flowSecret },
          after: (res) => void expect(res!.session_token).to.match(/^vgs_/),
        };
      }),
      refused("the redirect with another flow's secret", S.PERMISSION_DENIED, async (c) => {
        const u = await c.f.user();
        const sub = `tb-${randomBytes(4).toString("hex")}`;
        await c.idp.addAccount({ sub, email: u.email, email_verified: true });
        const s = await c.stack.clients.grants.startProviderSignIn({});
        const other = await c.stack.clients.grants.startProviderSignIn({});
        return { req: { callback_url: await c.idp.signIn(s.authorizationUrl, sub), flow_secret: other.flowSecret } };
      }),
    ],
  },
  "vaultgate.grants.v1.GrantsService/GetSession": session((t) => ({ session_token: t }), {
    otherUserOk: (_c, owner, _fx, res) => void expect((res as SessionRes).session.user_id).to.not.equal(owner.userId),
    after: (_c, owner, _fx, res) => void expect((res as SessionRes).session.user_id).to.equal(owner.userId),
  }),
  "vaultgate.grants.v1.GrantsService/EndSession": session((t) => ({ session_token: t }), {
    after: async (c, _o, _fx, _res, token) => {
      const refusal = await grpcRefusalOf(c.core.call("vaultgate.grants.v1.GrantsService", "GetSession", { session_token: token }));
      expect(refusal.code).to.equal(S.UNAUTHENTICATED);
    },
    // A repeated sign-out still answers a handoff naming the owner (it can end only their sessions).
    endedOk: (_c, owner, _fx, res) => void expect(decodeJwt((res as HandoffRes).signout_handoff).payload.sub).to.equal(owner.userId),
  }),
  "vaultgate.grants.v1.GrantsService/ContinueSignOut": continueSignOutEntry(),
  "vaultgate.grants.v1.GrantsService/StartPasskeyRegistration": session((t) => ({ session_token: t }), {
    stepUp: true,
    after: (_c, _o, _fx, res) => void expect(JSON.parse((res as PasskeyOptionsRes).options_json).challenge).to.be.a("string"),
  }),
  "vaultgate.grants.v1.GrantsService/FinishPasskeyRegistration": {
    kind: "session",
    cases: [
      ok("the owner's stepped-up session, its flow secret and the authenticator's answer", async (c) => {
        const owner = await c.f.user();
        const t = await c.f.steppedUpSession(owner);
        const s = await c.stack.clients.grants.startPasskeyRegistration({ sessionToken: t });
        return {
          req: { session_token: t, flow_secret: s.flowSecret, response_json: softPasskey().create(s.optionsJson, new URL(c.stack.issuer).origin), name: "k" },
          after: (res) => void expect((res as PasskeyRes).passkey.name).to.equal("k"),
        };
      }),
      refused("without a session token", S.UNAUTHENTICATED, async (c) => {
        const t = await c.f.steppedUpSession(await c.f.user());
        const s = await c.stack.clients.grants.startPasskeyRegistration({ sessionToken: t });
        return { req: { flow_secret: s.flowSecret, response_json: softPasskey().create(s.optionsJson, new URL(c.stack.issuer).origin) } };
      }),
      refused("another user's stepped-up session with the owner's flow", S.PERMISSION_DENIED, async (c) => {
        const t = await c.f.steppedUpSession(await c.f.user());
        const s = await c.stack.clients.grants.startPasskeyRegistration({ sessionToken: t });
        return {
          req: {
            session_token: await c.f.steppedUpSession(await c.f.user()),
            flow_secret: s.flowSecret,
            response_json: softPasskey().create(s.optionsJson, new URL(c.stack.issuer).origin),
          },
        };
      }),
      refused("an answer to another flow's challenge", S.PERMISSION_DENIED, async (c) => {
        const t = await c.f.steppedUpSession(await c.f.user());
        const s = await c.stack.clients.grants.startPasskeyRegistration({ sessionToken: t });
        const other = await c.stack.clients.grants.startPasskeyRegistration({ sessionToken: t });
        return { req: { session_token: t, flow_secret: s.flowSecret, response_json: softPasskey().create(other.optionsJson, new URL(c.stack.issuer).origin) } };
      }),
    ],
  },
  "vaultgate.grants.v1.GrantsService/ListPasskeys": session((t) => ({ session_token: t }), {
    setup: ownerPasskey,
    after: (_c, _o, fx, res) => void expect((res as PasskeysRes).passkeys.map((k) => k.passkey_id)).to.deep.equal([fx.passkeyId]),
    otherUserOk: (_c, _o, _fx, res) => void expect(res!.passkeys ?? []).to.deep.equal([]),
  }),
  "vaultgate.grants.v1.GrantsService/RemovePasskey": session((t, fx: { passkeyId: string }) => ({ session_token: t, passkey_id: fx.passkeyId }), {
    setup: ownerPasskey,
    stepUp: true,
    otherUser: S.NOT_FOUND,
  }),
  "vaultgate.grants.v1.GrantsService/StartPasskeyAssertion": {
    kind: "proof",
    cases: [
      ok("sign-in: no credential", async () => ({
        req: {},
        after: (res) => void expect(JSON.parse((res as PasskeyOptionsRes).options_json).challenge).to.be.a("string"),
      })),
      refused("step-up: a random session token", S.UNAUTHENTICATED, async () => ({ req: { session_token: `vgs_${randomBytes(32).toString("base64url")}` } })),
    ],
  },
  "vaultgate.grants.v1.GrantsService/FinishPasskeyAssertion": {
    kind: "proof",
    cases: [
      ok("sign-in: the owner's passkey answering this flow's challenge", async (c) => {
        const { key, origin } = await ownerPasskey(c, await c.f.user());
        const s = await c.stack.clients.grants.startPasskeyAssertion({});
        return {
          req: { flow_secret: s.flowSecret, response_json: key.get(s.optionsJson, origin) },
          after: (res) => void expect(res!.session_token).to.match(/^vgs_/),
        };
      }),
      refused("an answer to another flow's challenge", S.PERMISSION_DENIED, async (c) => {
        const { key, origin } = await ownerPasskey(c, await c.f.user());
        const s = await c.stack.clients.grants.startPasskeyAssertion({});
        const other = await c.stack.clients.grants.startPasskeyAssertion({});
        return { req: { flow_secret: s.flowSecret, response_json: key.get(other.optionsJson, origin) } };
      }),
      refused("step-up: the owner's passkey on another user's session", S.PERMISSION_DENIED, async (c) => {
        const owner = await c.f.user();
        const { key, origin } = await ownerPasskey(c, owner);
        const other = await c.f.user();
        await ownerPasskey(c, other);
        const t = await c.f.session(other);
        const s = await c.stack.clients.grants.startPasskeyAssertion({ sessionToken: t });
        return { req: { session_token: t, flow_secret: s.flowSecret, response_json: key.get(s.optionsJson, origin) } };
      }),
    ],
  },
};
