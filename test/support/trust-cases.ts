import { randomBytes } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import { PartnerStatus } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import type { TestStack } from "./stack.js";
import type { TestIdp } from "./oidc-idp.js";
import { ALL_AGENT_SCOPES } from "./budgets.js";
import { decodeJwt, forgeWithFreshKey, resignWithRealKey, tamperedCopy, unsignedCopy, type AgentToken, type Fixtures, type TestUser } from "./trust.js";
import { bearerMd, type GrpcCore, type WireResponse } from "./grpc-core.js";

/** The trust table's vocabulary: entries by credential kind, each with its cases. */

export const S = grpc.status;
export type Kind = "admin" | "agent" | "session" | "agent or session" | "client" | "partner" | "proof" | "public";

export interface Ctx {
  stack: TestStack;
  /** The organisation's OpenID Connect provider (node-oidc-provider in its own process). */
  idp: TestIdp;
  core: GrpcCore;
  f: Fixtures;
}
export interface Built {
  req: object;
  md?: grpc.Metadata;
  /** Checks after the call (the positive result, or that a refusal changed nothing). */
  after?: (res: WireResponse | undefined) => Promise<void> | void;
}
export interface Case {
  name: string;
  expect: "ok" | grpc.status;
  build: (c: Ctx) => Promise<Built>;
}
export interface Entry {
  kind: Kind;
  cases: Case[];
}

export const ok = (name: string, build: Case["build"]): Case => ({ name, expect: "ok", build });
export const refused = (name: string, code: grpc.status, build: Case["build"]): Case => ({ name, expect: code, build });

// ---------------------------------------------------------------------------
// admin: the operator credential, and nothing that merely resembles it.

export function admin(valid: (c: Ctx) => Promise<object> | object, after?: Built["after"]): Entry {
  return {
    kind: "admin",
    cases: [
      ok("with the operator credential", async (c) => ({ req: await valid(c), md: bearerMd(c.stack.adminToken), after })),
      refused("without any credential", S.UNAUTHENTICATED, async (c) => ({ req: await valid(c) })),
      refused("with a wrong operator token", S.UNAUTHENTICATED, async (c) => ({ req: await valid(c), md: bearerMd(randomBytes(16).toString("hex")) })),
      refused("with the operator token plus one character", S.UNAUTHENTICATED, async (c) => ({ req: await valid(c), md: bearerMd(`${c.stack.adminToken}0`) })),
      refused("with the gateway credential as bearer", S.UNAUTHENTICATED, async (c) => ({ req: await valid(c), md: bearerMd(c.stack.gatewayToken) })),
      refused("with the operator token outside the Bearer scheme", S.UNAUTHENTICATED, async (c) => {
        const m = new grpc.Metadata();
        m.set("authorization", c.stack.adminToken);
        return { req: await valid(c), md: m };
      }),
      refused("with the operator token in the gateway header", S.UNAUTHENTICATED, async (c) => ({
        req: await valid(c),
        md: bearerMd(undefined, { "x-vaultgate-gateway": c.stack.adminToken }),
      })),
    ],
  };
}

// ---------------------------------------------------------------------------
// agent: the raw grant access token in `access_token`, verified and read afresh.

export interface AgentOpts<F> {
  /** The scope the RPC needs; the grant without it is refused with PERMISSION_DENIED. */
  scope?: string;
  /** The grant the positive control (and every refusal) starts from. */
  grant?: (c: Ctx, user: TestUser) => Promise<AgentToken>;
  /** The resource the request names, made for the grant's user (every case gets its own). */
  setup?: (c: Ctx, user: TestUser) => Promise<F>;
  after?: (c: Ctx, token: AgentToken, user: TestUser, fx: F) => Built["after"];
}

export function agent<F = undefined>(build: (token: string, fx: F) => object, opts: AgentOpts<F> = {}): Entry {
  const fixture = async (c: Ctx, user?: TestUser) => (opts.setup ? await opts.setup(c, user ?? (await c.f.user())) : undefined) as F;
  const start = async (c: Ctx) => {
    const user = await c.f.user();
    const token = await (opts.grant ?? ((cc, u) => cc.f.grant(u, { stepUp: true })))(c, user);
    return { user, token, fx: await fixture(c, user) };
  };
  const now = (c: Ctx) => Math.floor(c.stack.clock().getTime() / 1000);
  const variant = (name: string, make: (c: Ctx, t: AgentToken, u: TestUser) => Promise<string> | string): Case =>
    refused(name, S.UNAUTHENTICATED, async (c) => {
      const { user, token, fx } = await start(c);
      return { req: build(await make(c, token, user), fx) };
    });
  const cases: Case[] = [
    ok("with the grant's access token", async (c) => {
      const { user, token, fx } = await start(c);
      return { req: build(token.accessToken, fx), after: opts.after?.(c, token, user, fx) };
    }),
    refused("without an access token", S.UNAUTHENTICATED, async (c) => ({ req: build("", await fixture(c)) })),
    refused("with the operator credential instead of a token", S.UNAUTHENTICATED, async (c) => ({
      req: build("", await fixture(c)),
      md: bearerMd(c.stack.adminToken),
    })),
    variant("with a random string", () => randomBytes(24).toString("base64url")),
    variant("forged: a fresh P-256 key signs the real kid and claims", (_c, t) => forgeWithFreshKey(t.accessToken)),
    variant("forged: alg none", (_c, t) => unsignedCopy(t.accessToken)),
    variant("tampered: another user's grant id under the original signature", async (c, t) => {
      const other = await c.f.grant(await c.f.user());
      return tamperedCopy(t.accessToken, { jti: other.grantId, sub: decodeJwt(other.accessToken).payload.sub });
    }),
    variant("real key, another issuer", (c, t) => resignWithRealKey(c.stack, t.accessToken, { iss: "https://evil.example" })),
    variant("real key, an audience of another deployment", (c, t) => {
      const aud = decodeJwt(t.accessToken).payload.aud as string[];
      return resignWithRealKey(c.stack, t.accessToken, { aud: ["https://mcp.other.example", aud[1]!] });
    }),
    variant("real key, typ JWT instead of at+jwt", (c, t) => resignWithRealKey(c.stack, t.accessToken, {}, { typ: "JWT" })),
    variant("real key, a lifetime over one hour", (c, t) => {
      const iat = now(c);
      return resignWithRealKey(c.stack, t.accessToken, { iat, nbf: iat, exp: iat + 7200 });
    }),
    variant("real key, expired beyond the 30 s skew", (c, t) => {
      const exp = now(c) - 45;
      return resignWithRealKey(c.stack, t.accessToken, { iat: exp - 3600, nbf: exp - 3600, exp });
    }),
    variant("real key, issued beyond the 30 s skew in the future", (c, t) => {
      const iat = now(c) + 120;
      return resignWithRealKey(c.stack, t.accessToken, { iat, nbf: iat, exp: iat + 3600 });
    }),
    variant("a partner access token", async (c) => (await c.f.partner()).token),
    variant("a revoked grant (kill switch)", async (c, t) => {
      await c.stack.clients.grants.revokeAllGrants({ accessToken: t.accessToken, reason: "trust-boundary test" });
      return t.accessToken;
    }),
    variant("a superseded grant", async (c, t) => {
      await c.stack.clients.grants.supersedeGrant({ accessToken: t.accessToken, scope: "" });
      return t.accessToken;
    }),
    variant("the grant of a deactivated user", async (c, t, u) => {
      await c.stack.admin.partnerResources.setUserStatus({ userId: u.userId, status: "inactive" });
      return t.accessToken;
    }),
  ];
  if (opts.scope) {
    const scope = opts.scope;
    cases.push(
      refused(`with a grant that lacks ${scope}`, S.PERMISSION_DENIED, async (c) => {
        const user = await c.f.user();
        const t = await c.f.grant(user, { stepUp: true, scopes: ALL_AGENT_SCOPES.filter((s) => s !== scope) });
        return { req: build(t.accessToken, await fixture(c, user)) };
      }),
    );
  }
  return { kind: "agent", cases };
}

// ---------------------------------------------------------------------------
// session: the signed-in web session's token; core derives the user and step-up time.

export interface SessionOpts<F> {
  /** The resource the request names, made for the owner. */
  setup?: (c: Ctx, owner: TestUser) => Promise<F>;
  /** The positive control needs a fresh step-up on the session. */
  stepUp?: boolean;
  /** The code for another user's (stepped-up) session naming the owner's resource. */
  otherUser?: grpc.status;
  /** Checks when another user's session may call but must see or change nothing of the owner's. */
  otherUserOk?: (c: Ctx, owner: TestUser, fx: F, res: WireResponse | undefined) => Promise<void> | void;
  after?: (c: Ctx, owner: TestUser, fx: F, res: WireResponse | undefined, token: string) => Promise<void> | void;
  /** The code without any session token (default UNAUTHENTICATED). */
  missing?: grpc.status;
  /** Checks when the owner's just-ended session may still call (a repeated sign-out); else it is refused. */
  endedOk?: (c: Ctx, owner: TestUser, fx: F, res: WireResponse | undefined) => Promise<void> | void;
}

export function session<F = undefined>(build: (token: string, fx: F) => object, opts: SessionOpts<F> = {}): Entry {
  const start = async (c: Ctx) => {
    const owner = await c.f.user();
    const fx = (opts.setup ? await opts.setup(c, owner) : undefined) as F;
    return { owner, fx };
  };
  const ownerSession = (c: Ctx, owner: TestUser) => (opts.stepUp ? c.f.steppedUpSession(owner) : c.f.session(owner));
  const cases: Case[] = [
    ok(`with the owner's session${opts.stepUp ? " after a fresh step-up" : ""}`, async (c) => {
      const { owner, fx } = await start(c);
      const token = await ownerSession(c, owner);
      return { req: build(token, fx), after: opts.after && ((res) => opts.after!(c, owner, fx, res, token)) };
    }),
    refused("without a session token", opts.missing ?? S.UNAUTHENTICATED, async (c) => {
      const { fx } = await start(c);
      return { req: build("", fx) };
    }),
    refused("with the operator credential instead of a session", opts.missing ?? S.UNAUTHENTICATED, async (c) => {
      const { fx } = await start(c);
      return { req: build("", fx), md: bearerMd(c.stack.adminToken) };
    }),
    refused("with a random session token", S.UNAUTHENTICATED, async (c) => {
      const { fx } = await start(c);
      return { req: build(`vgs_${randomBytes(32).toString("base64url")}`, fx) };
    }),
    refused("with the owner's agent access token as the session token", S.UNAUTHENTICATED, async (c) => {
      const { owner, fx } = await start(c);
      return { req: build((await c.f.grant(owner, { stepUp: true })).accessToken, fx) };
    }),
    opts.endedOk
      ? ok("with the owner's just-ended session", async (c) => {
          const { owner, fx } = await start(c);
          const s = await ownerSession(c, owner);
          await c.stack.clients.grants.endSession({ sessionToken: s });
          return { req: build(s, fx), after: (res) => opts.endedOk!(c, owner, fx, res) };
        })
      : refused("with the owner's ended session", S.UNAUTHENTICATED, async (c) => {
          const { owner, fx } = await start(c);
          const s = await ownerSession(c, owner);
          await c.stack.clients.grants.endSession({ sessionToken: s });
          return { req: build(s, fx) };
        }),
  ];
  if (opts.stepUp) {
    cases.push(
      refused("with the owner's session without a step-up", S.PERMISSION_DENIED, async (c) => {
        const { owner, fx } = await start(c);
        return { req: build(await c.f.session(owner), fx) };
      }),
    );
  }
  if (opts.otherUser !== undefined) {
    cases.push(
      refused("with another user's stepped-up session naming the owner's resource", opts.otherUser, async (c) => {
        const { fx } = await start(c);
        return { req: build(await c.f.steppedUpSession(await c.f.user()), fx) };
      }),
    );
  }
  if (opts.otherUserOk) {
    const check = opts.otherUserOk;
    cases.push(
      ok("with another user's session: nothing of the owner's is seen or changed", async (c) => {
        const { owner, fx } = await start(c);
        return { req: build(await c.f.steppedUpSession(await c.f.user()), fx), after: (res) => check(c, owner, fx, res) };
      }),
    );
  }
  return { kind: "session", cases };
}

// ---------------------------------------------------------------------------
// partner: the partner access token in `access_token`.

export interface PartnerOpts<F> {
  setup?: (c: Ctx, p: Awaited<ReturnType<Fixtures["partner"]>>) => Promise<F>;
  /** The scope the resource needs in the token; a token without it is refused. */
  scope?: string;
  /** The request names a user of this partner: another partner's token gets NOT_FOUND. */
  namesUser?: boolean;
}

export function partner<F = undefined>(build: (token: string, fx: F) => object, opts: PartnerOpts<F> = {}): Entry {
  const start = async (c: Ctx) => {
    const p = await c.f.partner();
    const fx = (opts.setup ? await opts.setup(c, p) : undefined) as F;
    return { p, fx };
  };
  const cases: Case[] = [
    ok("with the partner's access token", async (c) => {
      const { p, fx } = await start(c);
      return { req: build(p.token, fx) };
    }),
    refused("without an access token", S.UNAUTHENTICATED, async (c) => ({ req: build("", (await start(c)).fx) })),
    refused("with the operator credential instead of a token", S.UNAUTHENTICATED, async (c) => ({
      req: build("", (await start(c)).fx),
      md: bearerMd(c.stack.adminToken),
    })),
    refused("forged: a fresh P-256 key signs the real kid and claims", S.UNAUTHENTICATED, async (c) => {
      const { p, fx } = await start(c);
      return { req: build(forgeWithFreshKey(p.token), fx) };
    }),
    refused("real key, another audience", S.UNAUTHENTICATED, async (c) => {
      const { p, fx } = await start(c);
      return { req: build(resignWithRealKey(c.stack, p.token, { aud: "urn:other:partner-api" }), fx) };
    }),
    refused("an agent grant access token", S.UNAUTHENTICATED, async (c) => {
      const { fx } = await start(c);
      return { req: build((await c.f.grant(await c.f.user(), { stepUp: true })).accessToken, fx) };
    }),
    refused("the token of a suspended partner", S.PERMISSION_DENIED, async (c) => {
      const { p, fx } = await start(c);
      await c.stack.admin.partners.setPartnerStatus({ clientId: p.clientId, status: PartnerStatus.SUSPENDED });
      return { req: build(p.token, fx) };
    }),
  ];
  if (opts.scope) {
    const scope = opts.scope;
    cases.push(
      refused(`with a token that lacks ${scope}`, S.PERMISSION_DENIED, async (c) => {
        const { p, fx } = await start(c);
        const narrow = (
          await c.stack.clients.partners.issueToken({
            clientId: p.clientId,
            clientSecret: p.clientSecret,
            scope: scope === "kyc:read" ? "wallet:read" : "kyc:read",
          })
        ).accessToken;
        return { req: build(narrow, fx) };
      }),
    );
  }
  if (opts.namesUser) {
    cases.push(
      refused("another partner's token naming this partner's user", S.NOT_FOUND, async (c) => {
        const { fx } = await start(c);
        return { req: build((await c.f.partner()).token, fx) };
      }),
    );
  }
  return { kind: "partner", cases };
}

/** A user known to the partner, with the given consent scopes (default: every consent scope). */
export async function consentingUser(c: Ctx, p: { clientId: string }, scopes?: string[]): Promise<string> {
  const u = await c.f.user();
  await c.stack.admin.partnerResources.grantConsent({ clientId: p.clientId, userId: u.userId, scopes: scopes ? { scopes } : undefined });
  return u.userId;
}
