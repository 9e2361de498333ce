import { randomBytes, randomUUID } from "node:crypto";
import { expect } from "chai";
import * as grpc from "@grpc/grpc-js";
import { getOption, type DescService } from "@bufbuild/protobuf";
import { createConnectRouter } from "@connectrpc/connect";
import { admin_only } from "../../gen/vaultgate/common/v1/options_pb.js";
import { PartnerStatus } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { startStack, uniqueSlug, TEST_ISSUER, type TestStack } from "../support/stack.js";
import { startIdp, type TestIdp } from "../support/oidc-idp.js";
import {
  ALL_AGENT_SCOPES,
  bearerMd,
  decodeJwt,
  fixtures,
  forgeWithFreshKey,
  generatedServices,
  grpcRefusal,
  paymentWire,
  resignWithRealKey,
  startGrpcCore,
  statusName,
  tamperedCopy,
  unsignedCopy,
  type AgentToken,
  type Fixtures,
  type GrpcCore,
  type TestUser,
} from "../support/trust.js";
import { batchRequest, bindTreasury } from "../support/treasury.js";

/**
 * Core trusts no caller, over its whole surface: every method of every service core
 * serves has an entry here naming the credential it takes, with a positive control (so
 * no refusal passes vacuously) and the refusals: no credential, a forged one, another
 * user's, a revoked one. Calls go to core's real port through a stock grpc-js client.
 * A method without an entry fails, so a new RPC cannot ship without a decision here.
 */

const S = grpc.status;
type Kind = "admin" | "agent" | "session" | "agent or session" | "client" | "partner" | "proof" | "public";

interface Ctx {
  stack: TestStack;
  /** The organisation's OpenID Connect provider (node-oidc-provider in its own process). */
  idp: TestIdp;
  core: GrpcCore;
  f: Fixtures;
}
interface Built {
  req: object;
  md?: grpc.Metadata;
  /** Checks after the call (the positive result, or that a refusal changed nothing). */
  after?: (res: Record<string, any> | undefined) => Promise<void> | void;
}
interface Case {
  name: string;
  expect: "ok" | grpc.status;
  build: (c: Ctx) => Promise<Built>;
}
interface Entry {
  kind: Kind;
  cases: Case[];
}

const ok = (name: string, build: Case["build"]): Case => ({ name, expect: "ok", build });
const refused = (name: string, code: grpc.status, build: Case["build"]): Case => ({ name, expect: code, build });

// ---------------------------------------------------------------------------
// admin: the operator credential, and nothing that merely resembles it.

function admin(valid: (c: Ctx) => Promise<object> | object, after?: Built["after"]): Entry {
  const md = (c: Ctx, v: string | undefined, extra: Record<string, string> = {}) => bearerMd(v, extra);
  return {
    kind: "admin",
    cases: [
      ok("with the operator credential", async (c) => ({ req: await valid(c), md: md(c, c.stack.adminToken), after })),
      refused("without any credential", S.UNAUTHENTICATED, async (c) => ({ req: await valid(c) })),
      refused("with a wrong operator token", S.UNAUTHENTICATED, async (c) => ({ req: await valid(c), md: md(c, randomBytes(16).toString("hex")) })),
      refused("with the operator token plus one character", S.UNAUTHENTICATED, async (c) => ({ req: await valid(c), md: md(c, `${c.stack.adminToken}0`) })),
      refused("with the gateway credential as bearer", S.UNAUTHENTICATED, async (c) => ({ req: await valid(c), md: md(c, c.stack.gatewayToken) })),
      refused("with the operator token outside the Bearer scheme", S.UNAUTHENTICATED, async (c) => {
        const m = new grpc.Metadata();
        m.set("authorization", c.stack.adminToken);
        return { req: await valid(c), md: m };
      }),
      refused("with the operator token in the gateway header", S.UNAUTHENTICATED, async (c) => ({
        req: await valid(c),
        md: md(c, undefined, { "x-vaultgate-gateway": c.stack.adminToken }),
      })),
    ],
  };
}

// ---------------------------------------------------------------------------
// agent: the raw grant access token in `access_token`, verified and read afresh.

interface AgentOpts<F> {
  /** The scope the RPC needs; the grant without it is refused with PERMISSION_DENIED. */
  scope?: string;
  /** The grant the positive control (and every refusal) starts from. */
  grant?: (c: Ctx, user: TestUser) => Promise<AgentToken>;
  /** The resource the request names, made for the grant's user (every case gets its own). */
  setup?: (c: Ctx, user: TestUser) => Promise<F>;
  after?: (c: Ctx, token: AgentToken, user: TestUser, fx: F) => Built["after"];
}

function agent<F = undefined>(build: (token: string, fx: F) => object, opts: AgentOpts<F> = {}): Entry {
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
    refused("with the operator credential instead of a token", S.UNAUTHENTICATED, async (c) => ({ req: build("", await fixture(c)), md: bearerMd(c.stack.adminToken) })),
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

interface SessionOpts<F> {
  /** The resource the request names, made for the owner. */
  setup?: (c: Ctx, owner: TestUser) => Promise<F>;
  /** The positive control needs a fresh step-up on the session. */
  stepUp?: boolean;
  /** The code for another user's (stepped-up) session naming the owner's resource. */
  otherUser?: grpc.status;
  /** Checks when another user's session may call but must see or change nothing of the owner's. */
  otherUserOk?: (c: Ctx, owner: TestUser, fx: F, res: Record<string, any> | undefined) => Promise<void> | void;
  after?: (c: Ctx, owner: TestUser, fx: F, res: Record<string, any> | undefined, token: string) => Promise<void> | void;
  /** The code without any session token (default UNAUTHENTICATED). */
  missing?: grpc.status;
}

function session<F = undefined>(build: (token: string, fx: F) => object, opts: SessionOpts<F> = {}): Entry {
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
    refused("with the owner's ended session", S.UNAUTHENTICATED, async (c) => {
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

interface PartnerOpts<F> {
  setup?: (c: Ctx, p: Awaited<ReturnType<Fixtures["partner"]>>) => Promise<F>;
  /** The scope the resource needs in the token; a token without it is refused. */
  scope?: string;
  /** The request names a user of this partner: another partner's token gets NOT_FOUND. */
  namesUser?: boolean;
}

function partner<F = undefined>(build: (token: string, fx: F) => object, opts: PartnerOpts<F> = {}): Entry {
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
    refused("with the operator credential instead of a token", S.UNAUTHENTICATED, async (c) => ({ req: build("", (await start(c)).fx), md: bearerMd(c.stack.adminToken) })),
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
        const narrow = (await c.stack.clients.partners.issueToken({ clientId: p.clientId, clientSecret: p.clientSecret, scope: scope === "kyc:read" ? "wallet:read" : "kyc:read" })).accessToken;
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

// ---------------------------------------------------------------------------
// Shared fixtures for the session entries.

const draftBudget = (c: Ctx, owner: TestUser) => c.f.budget(owner, { stepUp: false });
const pending = (c: Ctx, owner: TestUser) => c.f.pendingPayment(owner);
const ownerGrant = async (c: Ctx, owner: TestUser) => {
  const t = await c.f.grant(owner);
  return { token: t, agentId: c.f.agentOf(t.accessToken) };
};
const stillActive = async (c: Ctx, token: string) => {
  const res = await c.stack.clients.grants.verifyAgentToken({ accessToken: token });
  expect(res.grant!.grantId).to.equal(decodeJwt(token).payload.jti);
};
const pendingIds = async (c: Ctx, owner: TestUser) => {
  const s = await c.f.session(owner);
  const res = await c.stack.clients.budgets.listPendingApprovals({ sessionToken: s });
  return { budgets: res.draftBudgets.map((b) => b.agentPrincipalId), payments: res.pendingPayments.map((p) => p.paymentId) };
};

/** An active budget under the user's root vault, which holds 1,000 cents to fund it from. */
const fundableBudget = async (c: Ctx, user: TestUser) => {
  const b = await c.f.budget(user, { stepUp: true });
  await c.stack.admin.budgets.fundVault({ vaultId: user.vaultId, amountCents: 1_000n });
  return { user, vaultId: b.vaultId };
};
type BudgetFx = Awaited<ReturnType<typeof fundableBudget>>;
const vaultRow = async (c: Ctx, vaultId: string) => Number((await c.stack.core.db("vaults").where({ id: vaultId }).first("balance_cents")).balance_cents);
const budgetRow = async (c: Ctx, vaultId: string) => (await c.stack.core.db("budgets").where({ vault_id: vaultId }).first("status")).status as string;
/** A refused fund or close left the budget as it was: active, empty, its parent untouched. */
const untouched = (c: Ctx, fx: BudgetFx) => async () => {
  expect([await budgetRow(c, fx.vaultId), await vaultRow(c, fx.vaultId), await vaultRow(c, fx.user.vaultId)]).to.deep.equal(["active", 0, 1_000]);
};

/**
 * An RPC that takes either an agent's access token or the owner's session: every agent
 * case and every session case, plus the mix-ups between them and the wrong grants.
 */
function agentOrSession(a: Entry, s: Entry, build: (creds: { access_token?: string; session_token?: string }, fx: BudgetFx) => object): Entry {
  const hostile: Case[] = [
    refused("as an agent whose grant is on the budget's own vault, not its parent", S.PERMISSION_DENIED, async (c) => {
      const user = await c.f.user();
      const fx = await fundableBudget(c, user);
      const own = await c.f.grant(user, { stepUp: true, vaultId: fx.vaultId });
      return { req: build({ access_token: own.accessToken }, fx), after: untouched(c, fx) };
    }),
    refused("as another user's agent naming the budget", S.NOT_FOUND, async (c) => {
      const fx = await fundableBudget(c, await c.f.user());
      const other = await c.f.grant(await c.f.user(), { stepUp: true });
      return { req: build({ access_token: other.accessToken }, fx), after: untouched(c, fx) };
    }),
    refused("with both the agent's access token and the owner's session", S.INVALID_ARGUMENT, async (c) => {
      const user = await c.f.user();
      const fx = await fundableBudget(c, user);
      const token = (await c.f.grant(user, { stepUp: true })).accessToken;
      return { req: build({ access_token: token, session_token: await c.f.steppedUpSession(user) }, fx), after: untouched(c, fx) };
    }),
  ];
  return {
    kind: "agent or session",
    cases: [...a.cases.map((x) => ({ ...x, name: `as an agent: ${x.name}` })), ...s.cases.map((x) => ({ ...x, name: `as the owner: ${x.name}` })), ...hostile],
  };
}

const fundWire = (creds: { access_token?: string; session_token?: string }, fx: BudgetFx) => ({ ...creds, vault_id: fx.vaultId, amount_cents: "100", idempotency_key: `tb-${randomUUID()}` });
const closeWire = (creds: { access_token?: string; session_token?: string }, fx: BudgetFx) => ({ ...creds, vault_id: fx.vaultId });
const funded = (c: Ctx, fx: BudgetFx) => async (res: Record<string, any> | undefined) => {
  expect([String(res!.balance_cents), res!.replayed]).to.deep.equal(["100", false]);
  expect([await vaultRow(c, fx.vaultId), await vaultRow(c, fx.user.vaultId)]).to.deep.equal([100, 900]);
};
const closed = (c: Ctx, fx: BudgetFx) => async (res: Record<string, any> | undefined) => {
  expect([res!.status, res!.already_closed]).to.deep.equal(["BUDGET_STATUS_CLOSED", false]);
  expect(await budgetRow(c, fx.vaultId)).to.equal("closed");
};

/** A fundable budget holding 100 cents, closed with keep_funds: what SweepBudget moves back. */
const keptBudget = async (c: Ctx, user: TestUser) => {
  const fx = await fundableBudget(c, user);
  await c.stack.admin.budgets.fundVault({ vaultId: fx.vaultId, amountCents: 100n });
  await c.stack.clients.budgets.closeBudget({ accessToken: (await c.f.grant(user, { stepUp: true })).accessToken, vaultId: fx.vaultId, keepFunds: true });
  return fx;
};
const swept = (c: Ctx, fx: BudgetFx) => async (res: Record<string, any> | undefined) => {
  expect([String(res!.swept_cents), res!.nothing_to_sweep]).to.deep.equal(["100", false]);
  expect([await vaultRow(c, fx.vaultId), await vaultRow(c, fx.user.vaultId)]).to.deep.equal([0, 1_100]);
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

// ---------------------------------------------------------------------------
// The table: "package.Service/Method" -> entry.

const TABLE: Record<string, Entry> = {
  // grpc.health.v1.Health: public.
  "grpc.health.v1.Health/Check": {
    kind: "public",
    cases: [ok("without any credential", async () => ({ req: { service: "" }, after: (res) => void expect(res!.status).to.equal("SERVING") }))],
  },

  // grpc.reflection.v1 / v1alpha ServerReflection: public. It only describes the services;
  // each described RPC keeps its own credential (the admin_only ones are refused above).
  "grpc.reflection.v1.ServerReflection/ServerReflectionInfo": {
    kind: "public",
    cases: [ok("without any credential", async () => ({ req: { list_services: "" }, after: (res) => void expect(res!.list_services_response.service.map((s: { name: string }) => s.name)).to.include("vaultgate.grants.v1.GrantsService") }))],
  },
  "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": {
    kind: "public",
    cases: [ok("without any credential", async () => ({ req: { list_services: "" }, after: (res) => void expect(res!.list_services_response.service.map((s: { name: string }) => s.name)).to.include("vaultgate.audit.v1.AuditService") }))],
  },

  // vaultgate.audit.v1.AuditService: admin.
  "vaultgate.audit.v1.AuditService/ListRecords": admin(() => ({ limit: 5 })),
  "vaultgate.audit.v1.AuditService/VerifyLedger": admin(() => ({})),
  "vaultgate.audit.v1.AuditService/TailRecords": admin(async (c) => {
    // A partner token issuance writes an audit record, so the tail has one to stream.
    await c.f.partner();
    return { since: "0" };
  }),

  // vaultgate.partners.v1.PartnersService.
  "vaultgate.partners.v1.PartnersService/IssueToken": {
    kind: "client",
    cases: [
      ok("with the partner's client secret", async (c) => {
        const p = await c.f.partner();
        return { req: { client_id: p.clientId, client_secret: p.clientSecret, scope: "kyc:read" }, after: (res) => void expect(res!.token_type).to.equal("Bearer") };
      }),
      refused("without a client secret", S.UNAUTHENTICATED, async (c) => ({ req: { client_id: (await c.f.partner()).clientId, client_secret: "" } })),
      refused("with the operator credential and no secret", S.UNAUTHENTICATED, async (c) => ({ req: { client_id: (await c.f.partner()).clientId, client_secret: "" }, md: bearerMd(c.stack.adminToken) })),
      refused("with a wrong secret", S.UNAUTHENTICATED, async (c) => ({ req: { client_id: (await c.f.partner()).clientId, client_secret: `gps_${randomBytes(32).toString("base64url")}` } })),
      refused("with another partner's secret", S.UNAUTHENTICATED, async (c) => ({ req: { client_id: (await c.f.partner()).clientId, client_secret: (await c.f.partner()).clientSecret } })),
      refused("with a rotated-away secret", S.UNAUTHENTICATED, async (c) => {
        const p = await c.f.partner();
        await c.stack.admin.partners.rotateSecret({ clientId: p.clientId });
        return { req: { client_id: p.clientId, client_secret: p.clientSecret } };
      }),
      refused("for a suspended partner", S.PERMISSION_DENIED, async (c) => {
        const p = await c.f.partner();
        await c.stack.admin.partners.setPartnerStatus({ clientId: p.clientId, status: PartnerStatus.SUSPENDED });
        return { req: { client_id: p.clientId, client_secret: p.clientSecret } };
      }),
    ],
  },
  "vaultgate.partners.v1.PartnersService/CreatePartner": admin(() => ({ name: "Trust partner", slug: uniqueSlug() })),
  "vaultgate.partners.v1.PartnersService/RotateSecret": admin(async (c) => ({ client_id: (await c.f.partner()).clientId })),
  "vaultgate.partners.v1.PartnersService/SetPartnerStatus": admin(async (c) => ({ client_id: (await c.f.partner()).clientId, status: "PARTNER_STATUS_SUSPENDED" })),
  "vaultgate.partners.v1.PartnersService/SetEntitlements": admin(async (c) => ({ client_id: (await c.f.partner()).clientId, entitlements: ["kyc:read"] })),
  "vaultgate.partners.v1.PartnersService/GetPartner": admin(async (c) => ({ client_id: (await c.f.partner()).clientId })),
  "vaultgate.partners.v1.PartnersService/CreateUser": admin(() => ({ email: `tb-${randomUUID()}@example.test` })),
  "vaultgate.partners.v1.PartnersService/ListPartners": admin(() => ({ limit: 5 })),
  "vaultgate.partners.v1.PartnersService/ListUsers": admin(() => ({ limit: 5 })),
  "vaultgate.partners.v1.PartnersService/GetUserByEmail": admin(async (c) => ({ email: (await c.f.user()).email })),

  // vaultgate.partners.v1.PartnerResourcesService: partner token; admin for the operator commands.
  "vaultgate.partners.v1.PartnerResourcesService/AuthorizePartner": partner((t, u: string) => ({ access_token: t, user_id: u, scope: "kyc:read" }), {
    setup: (c, p) => consentingUser(c, p),
    scope: "kyc:read",
    namesUser: true,
  }),
  "vaultgate.partners.v1.PartnerResourcesService/PreCreateUser": partner((t) => ({ access_token: t, email: `tb-${randomUUID()}@example.test` })),
  "vaultgate.partners.v1.PartnerResourcesService/GetKycStatus": partner((t, u: string) => ({ access_token: t, user_id: u }), {
    setup: (c, p) => consentingUser(c, p),
    scope: "kyc:read",
    namesUser: true,
  }),
  "vaultgate.partners.v1.PartnerResourcesService/CreateKycLink": partner((t, u: string) => ({ access_token: t, user_id: u, redirect_uri: "https://partner.example/done" }), {
    setup: (c, p) => consentingUser(c, p),
    scope: "kyc:read",
    namesUser: true,
  }),
  "vaultgate.partners.v1.PartnerResourcesService/ListWallets": partner((t, u: string) => ({ access_token: t, user_id: u }), {
    setup: (c, p) => consentingUser(c, p),
    scope: "wallet:read",
    namesUser: true,
  }),
  "vaultgate.partners.v1.PartnerResourcesService/GetUsAccount": partner((t, u: string) => ({ access_token: t, user_id: u }), {
    setup: (c, p) => consentingUser(c, p),
    scope: "us_account:read",
    namesUser: true,
  }),
  "vaultgate.partners.v1.PartnerResourcesService/ListTransfers": partner((t, u: string) => ({ access_token: t, user_id: u }), {
    setup: (c, p) => consentingUser(c, p),
    scope: "transfers:read",
    namesUser: true,
  }),
  "vaultgate.partners.v1.PartnerResourcesService/ListEvents": partner((t) => ({ access_token: t })),
  "vaultgate.partners.v1.PartnerResourcesService/SetKycStatus": admin(async (c) => ({ user_id: (await c.f.user()).userId, status: "pending", provider: "sandbox" })),
  "vaultgate.partners.v1.PartnerResourcesService/SetUserStatus": admin(async (c) => ({ user_id: (await c.f.user()).userId, status: "active" })),
  "vaultgate.partners.v1.PartnerResourcesService/AddWallet": admin(async (c) => ({ user_id: (await c.f.user()).userId, chain: "base", address: "0xabc0000000000000000000000000000000000002" })),
  "vaultgate.partners.v1.PartnerResourcesService/ProvisionUsAccount": admin(async (c) => ({ user_id: (await c.f.user()).userId })),
  "vaultgate.partners.v1.PartnerResourcesService/GrantConsent": admin(async (c) => ({ client_id: (await c.f.partner()).clientId, user_id: (await c.f.user()).userId })),
  "vaultgate.partners.v1.PartnerResourcesService/RevokeConsent": admin(async (c) => {
    const p = await c.f.partner();
    return { client_id: p.clientId, user_id: await consentingUser(c, p) };
  }),
  "vaultgate.partners.v1.PartnerResourcesService/RecordLedgerEntry": admin(async (c) => ({ user_id: (await c.f.user()).userId, direction: "credit", amount_cents: "100", currency: "USD" })),
  "vaultgate.partners.v1.PartnerResourcesService/SetWebhook": admin(async (c) => ({ client_id: (await c.f.partner()).clientId, url: "" })),

  // vaultgate.treasury.v1.TreasuryService.
  "vaultgate.treasury.v1.TreasuryService/BindTreasury": admin(async (c) => ({ client_id: (await c.f.partner()).clientId, payer_entity_id: randomUUID(), balance_cents: "1000", currency: "USD" })),
  "vaultgate.treasury.v1.TreasuryService/SetTreasuryStatus": admin(async (c) => {
    const p = await c.f.partner();
    await bindTreasury(c.stack.admin, p);
    return { client_id: p.clientId, status: "TREASURY_STATUS_SUSPENDED" };
  }),
  "vaultgate.treasury.v1.TreasuryService/FundTreasury": admin(async (c) => {
    const p = await c.f.partner();
    await bindTreasury(c.stack.admin, p);
    return { client_id: p.clientId, amount_cents: "100" };
  }),
  "vaultgate.treasury.v1.TreasuryService/GetTreasury": partner((t) => ({ access_token: t }), {
    setup: async (c, p) => void (await bindTreasury(c.stack.admin, p)),
    scope: "treasury:write",
  }),
  "vaultgate.treasury.v1.TreasuryService/ExecuteBatch": partner(
    (t, fx: { payer: string; recipient: string }) => {
      const r = batchRequest({ token: t }, fx.payer, [{ recipientUserId: fx.recipient }]);
      return {
        access_token: r.accessToken,
        idempotency_key: r.idempotencyKey,
        payer_entity_id: r.payerEntityId,
        items: r.items.map((i) => ({ execution_id: i.executionId, payout_id: i.payoutId, recipient_user_id: i.recipientUserId, amount_cents: String(i.amountCents), currency: i.currency, reference: i.reference })),
      };
    },
    {
      setup: async (c, p) => ({ payer: await bindTreasury(c.stack.admin, p), recipient: await consentingUser(c, p, ["payouts:receive"]) }),
      scope: "treasury:write",
    },
  ),
  "vaultgate.treasury.v1.TreasuryService/GetPayout": partner((t, fx: { recipient: string; payoutId: string }) => ({ access_token: t, user_id: fx.recipient, payout_id: fx.payoutId }), {
    setup: async (c, p) => {
      const payer = await bindTreasury(c.stack.admin, p);
      const recipient = await consentingUser(c, p, ["payouts:receive"]);
      const req = batchRequest(p, payer, [{ recipientUserId: recipient }]);
      await c.stack.clients.treasury.executeBatch(req);
      return { recipient, payoutId: req.items[0]!.payoutId };
    },
    scope: "payouts:receive",
    namesUser: true,
  }),

  // vaultgate.grants.v1.GrantsService.
  "vaultgate.grants.v1.GrantsService/GetJwks": {
    kind: "public",
    cases: [ok("without any credential", async () => ({ req: {}, after: (res) => void expect(JSON.parse(res!.jwks_json).keys).to.have.length.greaterThan(0) }))],
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
      expect(res!.token.jti).to.not.equal(t.grantId);
      const refusal = await grpcRefusal(c.core.call("vaultgate.grants.v1.GrantsService", "VerifyAgentToken", { access_token: t.accessToken }));
      expect(refusal.code).to.equal(S.UNAUTHENTICATED);
    },
  }),
  "vaultgate.grants.v1.GrantsService/RevokeAllGrants": agent((t) => ({ access_token: t, reason: "trust boundary" }), {
    after: (c, t) => async (res) => {
      expect(res!.revoked).to.be.at.least(1);
      const refusal = await grpcRefusal(c.core.call("vaultgate.grants.v1.GrantsService", "VerifyAgentToken", { access_token: t.accessToken }));
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
      refused("a forged refresh token", S.INVALID_ARGUMENT, async (c) => ({ req: { refresh_token: `vgr_${randomBytes(32).toString("base64url")}` }, md: bearerMd(c.stack.adminToken) })),
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
      const start = async (c: Ctx) => {
        const client = await c.f.oauthClient();
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
        ok("with the client's secret, the code and its PKCE verifier", async (c) => ({ req: wire(await start(c)), after: (res) => void expect(res!.token.access_token).to.be.a("string") })),
        refused("without a client secret", S.UNAUTHENTICATED, async (c) => ({ req: wire(await start(c), { secret: "" }) })),
        refused("with the operator credential and no client secret", S.UNAUTHENTICATED, async (c) => ({ req: wire(await start(c), { secret: "" }), md: bearerMd(c.stack.adminToken) })),
        refused("with a wrong client secret", S.UNAUTHENTICATED, async (c) => ({ req: wire(await start(c), { secret: `ags_${randomBytes(32).toString("base64url")}` }) })),
        refused("with another client's credentials", S.INVALID_ARGUMENT, async (c) => {
          const other = await c.f.oauthClient();
          return { req: wire(await start(c), { id: other.clientId, secret: other.clientSecret }) };
        }),
        refused("with a wrong PKCE verifier", S.INVALID_ARGUMENT, async (c) => ({ req: wire(await start(c), { verifier: randomBytes(32).toString("base64url") }) })),
        refused("a code already used", S.INVALID_ARGUMENT, async (c) => {
          const x = await start(c);
          await c.stack.clients.grants.exchangeCode({ clientId: x.client.clientId, clientSecret: x.client.clientSecret, code: x.code, redirectUri: x.client.redirectUri, codeVerifier: x.verifier });
          return { req: wire(x) };
        }),
      ];
    })(),
  },
  "vaultgate.grants.v1.GrantsService/RevokeToken": {
    kind: "client",
    cases: (() => {
      const start = async (c: Ctx) => {
        const client = await c.f.oauthClient();
        const grant = await c.f.clientGrant(await c.f.user(), client);
        return { client, grant };
      };
      return [
        ok("the client's own token with its secret", async (c) => {
          const x = await start(c);
          return {
            req: { client_id: x.client.clientId, client_secret: x.client.clientSecret, token: x.grant.accessToken },
            after: async () => {
              const refusal = await grpcRefusal(c.core.call("vaultgate.grants.v1.GrantsService", "VerifyAgentToken", { access_token: x.grant.accessToken }));
              expect(refusal.code).to.equal(S.UNAUTHENTICATED);
            },
          };
        }),
        refused("without a client secret", S.UNAUTHENTICATED, async (c) => {
          const x = await start(c);
          return { req: { client_id: x.client.clientId, client_secret: "", token: x.grant.accessToken }, after: () => stillActive(c, x.grant.accessToken) };
        }),
        refused("with a wrong client secret", S.UNAUTHENTICATED, async (c) => {
          const x = await start(c);
          return { req: { client_id: x.client.clientId, client_secret: `ags_${randomBytes(32).toString("base64url")}`, token: x.grant.accessToken }, after: () => stillActive(c, x.grant.accessToken) };
        }),
        refused("another client's token", S.INVALID_ARGUMENT, async (c) => {
          const x = await start(c);
          const other = await c.f.oauthClient();
          return { req: { client_id: other.clientId, client_secret: other.clientSecret, token: x.grant.accessToken }, after: () => stillActive(c, x.grant.accessToken) };
        }),
        refused("an operator-issued grant's token", S.INVALID_ARGUMENT, async (c) => {
          const other = await c.f.oauthClient();
          const g = await c.f.grant(await c.f.user());
          return { req: { client_id: other.clientId, client_secret: other.clientSecret, token: g.accessToken }, after: () => stillActive(c, g.accessToken) };
        }),
      ];
    })(),
  },
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
        after: (res) => void expect(res!.authorization_url.startsWith(c.idp.issuer)).to.equal(true),
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
        return { req: { callback_url: await c.idp.signIn(s.authorizationUrl, sub), flow_secret: s.flowSecret }, after: (res) => void expect(res!.session_token).to.match(/^vgs_/) };
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
    otherUserOk: (_c, owner, _fx, res) => void expect(res!.session.user_id).to.not.equal(owner.userId),
    after: (_c, owner, _fx, res) => void expect(res!.session.user_id).to.equal(owner.userId),
  }),
  "vaultgate.grants.v1.GrantsService/EndSession": session((t) => ({ session_token: t }), {
    after: async (c, _o, _fx, _res, token) => {
      const refusal = await grpcRefusal(c.core.call("vaultgate.grants.v1.GrantsService", "GetSession", { session_token: token }));
      expect(refusal.code).to.equal(S.UNAUTHENTICATED);
    },
  }),
  "vaultgate.grants.v1.GrantsService/ListAgents": session((t) => ({ session_token: t }), {
    setup: ownerGrant,
    after: (_c, _o, fx, res) => void expect(res!.agents.map((a: { agent_id: string }) => a.agent_id)).to.include(fx.agentId),
    otherUserOk: (_c, _o, fx, res) => void expect(res!.agents.map((a: { agent_id: string }) => a.agent_id)).to.not.include(fx.agentId),
  }),
  "vaultgate.grants.v1.GrantsService/GetAgent": session((t, fx: { agentId: string }) => ({ session_token: t, agent_id: fx.agentId }), {
    setup: ownerGrant,
    otherUser: S.NOT_FOUND,
  }),
  "vaultgate.grants.v1.GrantsService/RevokeUserGrant": session((t, fx: { token: AgentToken }) => ({ session_token: t, grant_id: fx.token.grantId }), {
    setup: ownerGrant,
    otherUser: S.NOT_FOUND,
    after: async (c, _o, fx) => {
      const refusal = await grpcRefusal(c.core.call("vaultgate.grants.v1.GrantsService", "VerifyAgentToken", { access_token: fx.token.accessToken }));
      expect(refusal.code).to.equal(S.UNAUTHENTICATED);
    },
  }),
  "vaultgate.grants.v1.GrantsService/KillSwitch": session((t) => ({ session_token: t }), {
    setup: ownerGrant,
    after: async (c, _o, fx) => {
      const refusal = await grpcRefusal(c.core.call("vaultgate.grants.v1.GrantsService", "VerifyAgentToken", { access_token: fx.token.accessToken }));
      expect(refusal.code).to.equal(S.UNAUTHENTICATED);
    },
    otherUserOk: (c, _o, fx) => stillActive(c, fx.token.accessToken),
  }),
  "vaultgate.grants.v1.GrantsService/ListOutbox": admin(() => ({ email: "nobody@example.test" })),

  // vaultgate.budgets.v1.BudgetsService.
  "vaultgate.budgets.v1.BudgetsService/CreateBudget": agent(
    (t) => ({ access_token: t, purpose: "trip", display_name: "Trust budget", chain_allowlist: ["base"], idempotency_key: `tb-${randomUUID()}` }),
    { scope: "agent:budget:create" },
  ),
  "vaultgate.budgets.v1.BudgetsService/ActivateBudget": session((t, fx: { agentPrincipalId: string }) => ({ session_token: t, agent_principal_id: fx.agentPrincipalId }), {
    setup: draftBudget,
    stepUp: true,
    otherUser: S.NOT_FOUND,
    after: (_c, _o, _fx, res) => void expect(res!.budget.status).to.equal("BUDGET_STATUS_ACTIVE"),
  }),
  "vaultgate.budgets.v1.BudgetsService/InitiatePayment": agent((t) => ({ access_token: t, payment: paymentWire() }), {
    scope: "payments:initiate",
    grant: async (c, u) => (await c.f.fundedBudget(u)).agent,
  }),
  "vaultgate.budgets.v1.BudgetsService/SimulatePayment": agent((t) => ({ access_token: t, payment: paymentWire() }), {
    scope: "payments:simulate",
    grant: async (c, u) => (await c.f.fundedBudget(u)).agent,
  }),
  "vaultgate.budgets.v1.BudgetsService/ApprovePayment": session((t, fx: { paymentId: string }) => ({ session_token: t, payment_id: fx.paymentId }), {
    setup: pending,
    stepUp: true,
    otherUser: S.NOT_FOUND,
    after: (_c, _o, _fx, res) => void expect(res!.payment.status).to.equal("PAYMENT_STATUS_APPROVED"),
  }),
  "vaultgate.budgets.v1.BudgetsService/DeclinePayment": session((t, fx: { paymentId: string }) => ({ session_token: t, payment_id: fx.paymentId }), {
    setup: pending,
    otherUser: S.NOT_FOUND,
    after: (_c, _o, _fx, res) => void expect(res!.payment.status).to.equal("PAYMENT_STATUS_DECLINED"),
  }),
  "vaultgate.budgets.v1.BudgetsService/DeclineBudget": session((t, fx: { agentPrincipalId: string }) => ({ session_token: t, agent_principal_id: fx.agentPrincipalId }), {
    setup: draftBudget,
    otherUser: S.NOT_FOUND,
    after: (_c, _o, _fx, res) => void expect(res!.budget.status).to.equal("BUDGET_STATUS_DECLINED"),
  }),
  "vaultgate.budgets.v1.BudgetsService/ListPendingApprovals": session((t) => ({ session_token: t }), {
    setup: pending,
    after: (_c, _o, fx, res) => void expect(res!.pending_payments.map((p: { payment_id: string }) => p.payment_id)).to.include(fx.paymentId),
    otherUserOk: async (c, owner, fx, res) => {
      expect(res!.pending_payments.map((p: { payment_id: string }) => p.payment_id)).to.not.include(fx.paymentId);
      expect((await pendingIds(c, owner)).payments).to.include(fx.paymentId);
    },
  }),
  // A read of the owner's own money: no step-up; another user's session sees only its own vaults.
  "vaultgate.budgets.v1.BudgetsService/GetMoneyView": session((t) => ({ session_token: t }), {
    setup: (c, owner) => c.f.fundedBudget(owner),
    after: (_c, owner, fx, res) => {
      expect(res!.vaults.map((v: { vault_id: string }) => v.vault_id)).to.deep.equal([owner.vaultId, fx.vaultId]);
      expect(res!.vaults[1].balance_cents).to.equal("100000");
    },
    otherUserOk: (_c, owner, fx, res) => {
      const seen = res!.vaults.map((v: { vault_id: string }) => v.vault_id);
      expect(seen).to.have.length(1);
      expect(seen).to.not.include(owner.vaultId);
      expect(seen).to.not.include(fx.vaultId);
    },
  }),
  "vaultgate.budgets.v1.BudgetsService/GetBalance": agent((t) => ({ access_token: t }), { scope: "accounts:read" }),
  "vaultgate.budgets.v1.BudgetsService/ListGrantAudit": agent((t) => ({ access_token: t, limit: 10 }), { scope: "audit:stream" }),
  "vaultgate.budgets.v1.BudgetsService/FundBudget": agentOrSession(
    agent((t, fx: BudgetFx) => fundWire({ access_token: t }, fx), { scope: "agent:budget:create", setup: fundableBudget, after: (c, _t, _u, fx) => funded(c, fx) }),
    session((t, fx: BudgetFx) => fundWire({ session_token: t }, fx), {
      setup: fundableBudget,
      stepUp: true,
      otherUser: S.NOT_FOUND,
      after: (c, _o, fx, res) => funded(c, fx)(res),
    }),
    fundWire,
  ),
  "vaultgate.budgets.v1.BudgetsService/CloseBudget": agentOrSession(
    agent((t, fx: BudgetFx) => closeWire({ access_token: t }, fx), { scope: "agent:budget:create", setup: fundableBudget, after: (c, _t, _u, fx) => closed(c, fx) }),
    session((t, fx: BudgetFx) => closeWire({ session_token: t }, fx), {
      setup: fundableBudget,
      stepUp: true,
      otherUser: S.NOT_FOUND,
      after: (c, _o, fx, res) => closed(c, fx)(res),
    }),
    closeWire,
  ),
  "vaultgate.budgets.v1.BudgetsService/SweepBudget": agentOrSession(
    agent((t, fx: BudgetFx) => closeWire({ access_token: t }, fx), { scope: "agent:budget:create", setup: keptBudget, after: (c, _t, _u, fx) => swept(c, fx) }),
    session((t, fx: BudgetFx) => closeWire({ session_token: t }, fx), {
      setup: keptBudget,
      stepUp: true,
      otherUser: S.NOT_FOUND,
      after: (c, _o, fx, res) => swept(c, fx)(res),
    }),
    closeWire,
  ),
  "vaultgate.budgets.v1.BudgetsService/ListStrandedFunds": admin(() => ({})),
  "vaultgate.budgets.v1.BudgetsService/FundVault": admin(async (c) => ({ vault_id: (await c.f.user()).vaultId, amount_cents: "100" })),
  "vaultgate.budgets.v1.BudgetsService/ReapProvisioning": admin(() => ({})),
};

/** A user known to the partner, with the given consent scopes (default: every consent scope). */
async function consentingUser(c: Ctx, p: { clientId: string }, scopes?: string[]): Promise<string> {
  const u = await c.f.user();
  await c.stack.admin.partnerResources.grantConsent({ clientId: p.clientId, userId: u.userId, scopes: scopes ? { scopes } : undefined });
  return u.userId;
}

// ---------------------------------------------------------------------------

const services = await generatedServices();
const methodKey = (s: DescService, m: string) => `${s.typeName}/${m}`;

describe("core trusts no caller: every RPC over a real port", function () {
  this.timeout(120_000);
  const c = {} as Ctx;

  before(async () => {
    c.idp = await startIdp({ redirectUris: [`${TEST_ISSUER}/signin/oidc/callback`] });
    c.stack = await startStack({ oidc: { issuer: c.idp.issuer, clientId: c.idp.clientId, clientSecret: c.idp.clientSecret, stepUpAcr: [] } });
    c.core = await startGrpcCore(c.stack);
    c.f = fixtures(c.stack);
  });
  after(async () => {
    await c.core?.close();
    await c.stack?.close();
    await c.idp?.stop();
  });

  describe("the table", () => {
    it("covers exactly the methods core serves, and they are the generated ones", () => {
      const router = createConnectRouter();
      c.stack.core.routes(router);
      const served = router.handlers.map((h) => `${h.service.typeName}/${h.method.name}`).sort();
      const generated = services.flatMap((s) => s.methods.map((m) => methodKey(s, m.name))).sort();
      expect(served.filter((k) => !TABLE[k]), "served methods without a trust table entry").to.deep.equal([]);
      expect(generated.filter((k) => !TABLE[k]), "generated methods without a trust table entry").to.deep.equal([]);
      expect(Object.keys(TABLE).filter((k) => !served.includes(k)), "table entries core does not serve").to.deep.equal([]);
      expect(served).to.deep.equal(generated);
    });

    it("marks as admin exactly the methods whose proto says admin_only", () => {
      const mismatched = services.flatMap((s) =>
        s.methods.filter((m) => TABLE[methodKey(s, m.name)] && getOption(m, admin_only) !== (TABLE[methodKey(s, m.name)]!.kind === "admin")).map((m) => methodKey(s, m.name)),
      );
      expect(mismatched).to.deep.equal([]);
    });

    it("has a positive control in every entry, and a refusal in every entry that takes a credential", () => {
      for (const [key, entry] of Object.entries(TABLE)) {
        expect(entry.cases.some((x) => x.expect === "ok"), `${key}: positive control`).to.equal(true);
        if (entry.kind !== "public") expect(entry.cases.some((x) => x.expect !== "ok"), `${key}: refusals`).to.equal(true);
      }
    });
  });

  for (const service of services) {
    describe(service.typeName, () => {
      for (const method of service.methods) {
        const key = methodKey(service, method.name);
        const entry = TABLE[key];
        describe(`${method.name} [${entry?.kind ?? "no entry"}]`, () => {
          if (!entry) {
            it("has a trust table entry", () => expect.fail(`${key} has no entry in the trust table: decide which credential it takes`));
            return;
          }
          for (const spec of entry.cases) {
            const title = spec.expect === "ok" ? `succeeds ${spec.name}` : `refuses ${spec.name} with ${statusName(spec.expect)}`;
            it(title, async () => {
              const built = await spec.build(c);
              const call = c.core.call(service.typeName, method.name, built.req, built.md);
              if (spec.expect === "ok") {
                const res = await call;
                await built.after?.(res);
              } else {
                const err = await grpcRefusal(call);
                expect(statusName(err.code), err.details).to.equal(statusName(spec.expect));
                await built.after?.(undefined);
              }
            });
          }
        });
      }
    });
  }
});

describe("core trusts no caller: the client address behind RegisterClient", () => {
  let stack: TestStack;
  let core: GrpcCore;
  const LIMIT = 2;
  const register = (md?: grpc.Metadata) =>
    core.call(
      "vaultgate.grants.v1.GrantsService",
      "RegisterClient",
      {
        client_name: "Address test",
        redirect_uris: ["http://127.0.0.1:9/callback"],
        grant_types: ["authorization_code"],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_post",
        scope: "accounts:read",
      },
      md,
    );
  const vouched = (address: string, credential = stack.gatewayToken) => bearerMd(undefined, { "x-vaultgate-gateway": credential, "x-vaultgate-client-address": address });
  const spoofed = (address: string) => bearerMd(undefined, { "x-vaultgate-client-address": address });

  before(async () => {
    stack = await startStack({ registrationLimitPerMinute: LIMIT });
    core = await startGrpcCore(stack);
  });
  after(async () => {
    await core?.close();
    await stack?.close();
  });

  it("believes an address only from a gateway presenting the gateway credential", async () => {
    // Direct callers claiming a different address each time still share one bucket (other
    // suites in this process may have used it already, so count successes, not which ones).
    const outcomes = [];
    for (let i = 0; i <= LIMIT; i++) outcomes.push(await register(spoofed(`198.51.100.${i + 1}`)).then(() => "ok", (e: grpc.ServiceError) => statusName(e.code)));
    expect(outcomes.filter((o) => o === "ok").length, outcomes.join(",")).to.be.at.most(LIMIT);
    expect(outcomes.at(-1)).to.equal("RESOURCE_EXHAUSTED");
    expect((await grpcRefusal(register())).code).to.equal(S.RESOURCE_EXHAUSTED);
    // A wrong gateway credential is no credential: its addresses land in the same bucket.
    expect((await grpcRefusal(register(vouched("203.0.113.7", randomBytes(16).toString("hex"))))).code).to.equal(S.RESOURCE_EXHAUSTED);
    expect((await grpcRefusal(register(vouched("203.0.113.8", stack.adminToken)))).code).to.equal(S.RESOURCE_EXHAUSTED);
    // The gateway vouches: each address has its own bucket.
    for (let i = 0; i < LIMIT; i++) await register(vouched("203.0.113.10"));
    expect((await grpcRefusal(register(vouched("203.0.113.10")))).code).to.equal(S.RESOURCE_EXHAUSTED);
    await register(vouched("203.0.113.11"));
  });
});
