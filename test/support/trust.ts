import { createHash, randomBytes, randomUUID, sign, type KeyObject } from "node:crypto";
import { newP256PrivateKey } from "../../lib/crypto.js";
import { readdirSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import type { DescService } from "@bufbuild/protobuf";
import { PARTNER_SCOPES } from "../../lib/vocabulary.js";
import type { TestStack } from "./stack.js";
import { ALL_AGENT_SCOPES } from "./budgets.js";
import { afterSendGap } from "./agent-oauth.js";
import { createPartner, type TestPartner } from "./partners.js";
import { bindTreasury, createRecipient, batchRequest } from "./treasury.js";

/**
 * Support for the trust-boundary suites (core's real port: grpc-core.ts): fixtures made
 * through core's own RPCs (users, grants, web sessions, step-ups,
 * budgets, pending payments, partners, OAuth clients) and forged credentials.
 */

const genDir = fileURLToPath(new URL("../../gen", import.meta.url));

/** Every service descriptor exported by every generated gen/**\/*_pb file. */
export async function generatedServices(): Promise<DescService[]> {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(dir, e.name));
      else if (/_pb\.(ts|js)$/.test(e.name)) files.push(join(dir, e.name));
    }
  };
  walk(genDir);
  const out = new Map<string, DescService>();
  for (const file of files.sort()) {
    const mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
    for (const v of Object.values(mod)) {
      if (v && typeof v === "object" && (v as { kind?: unknown }).kind === "service") out.set((v as DescService).typeName, v as DescService);
    }
  }
  if (out.size === 0) throw new Error(`no service descriptors under ${relative(process.cwd(), genDir)}`);
  return [...out.values()];
}

// ---------------------------------------------------------------------------
// Forged and tampered JWTs.

function b64json(v: unknown) {
  return Buffer.from(JSON.stringify(v)).toString("base64url");
}

/** Header and payload of a compact JWS, unverified. */
export function decodeJwt(token: string): { header: Record<string, unknown>; payload: Record<string, unknown> } {
  const [h, p] = token.split(".");
  return { header: JSON.parse(Buffer.from(h!, "base64url").toString()), payload: JSON.parse(Buffer.from(p!, "base64url").toString()) };
}

/** Signs an ES256 JWS with `key` (any P-256 private key). */
export function signEs256(header: Record<string, unknown>, payload: Record<string, unknown>, key: KeyObject): string {
  const input = `${b64json({ ...header, alg: "ES256" })}.${b64json(payload)}`;
  return `${input}.${sign("sha256", Buffer.from(input), { key, dsaEncoding: "ieee-p1363" }).toString("base64url")}`;
}

/** The same header (real kid) and claims as `token`, signed by a freshly generated P-256 key. */
export function forgeWithFreshKey(token: string, claims: Record<string, unknown> = {}): string {
  const { header, payload } = decodeJwt(token);
  return signEs256(header, { ...payload, ...claims }, newP256PrivateKey());
}

/** `alg: none` with the real token's header and claims. */
export function unsignedCopy(token: string): string {
  const { header, payload } = decodeJwt(token);
  return `${b64json({ ...header, alg: "none" })}.${b64json(payload)}.`;
}

/** A copy of `token` with its claims changed, still carrying the original signature. */
export function tamperedCopy(token: string, claims: Record<string, unknown>): string {
  const [h, p, s] = token.split(".");
  const payload = { ...JSON.parse(Buffer.from(p!, "base64url").toString()), ...claims };
  return `${h}.${b64json(payload)}.${s}`;
}

/**
 * Re-signs `token`'s claims (changed by `claims`, header by `header`) with core's real
 * current key: only core's own checks of iss, aud, typ, lifetime and time can refuse it.
 */
export function resignWithRealKey(
  stack: Pick<TestStack, "core">,
  token: string,
  claims: Record<string, unknown>,
  header: Record<string, unknown> = {},
): string {
  const d = decodeJwt(token);
  const { alg: _a, kid: _k, ...rest } = d.header;
  return stack.core.keyring.signJwt({ ...rest, ...header }, { ...d.payload, ...claims });
}

// ---------------------------------------------------------------------------
// Fixtures through core's RPCs (Connect clients on the in-process transport: stack.admin
// carries the operator credential, stack.clients carries none).

export interface TestUser {
  email: string;
  userId: string;
  vaultId: string;
}

export interface AgentToken {
  accessToken: string;
  refreshToken: string;
  grantId: string;
}

export function fixtures(stack: Pick<TestStack, "admin" | "clients"> & Partial<Pick<TestStack, "clock">>) {
  const f = {
    async user(): Promise<TestUser> {
      const email = `t-${randomBytes(6).toString("hex")}@example.test`;
      const res = await stack.admin.partners.createUser({ email });
      return { email, userId: res.userId, vaultId: res.vaultId };
    },

    /** An operator-issued grant (admin IssueGrant). */
    async grant(
      user: Pick<TestUser, "userId" | "vaultId">,
      opts: { scopes?: string[]; stepUp?: boolean; vaultId?: string; clientId?: string } = {},
    ): Promise<AgentToken> {
      const res = await stack.admin.grants.issueGrant({
        userId: user.userId,
        vaultId: opts.vaultId ?? user.vaultId,
        scopes: opts.scopes ?? ALL_AGENT_SCOPES,
        stepUp: opts.stepUp ?? false,
        clientId: opts.clientId ?? "",
      });
      return { accessToken: res.token!.accessToken, refreshToken: res.token!.refreshToken, grantId: res.token!.jti };
    },

    /** The newest 6-digit code e-mailed to `email`. */
    async code(email: string): Promise<string> {
      const { messages } = await stack.admin.grants.listOutbox({ email });
      const m = /\b(\d{6})\b/.exec(messages[0]?.subject ?? "");
      if (!m) throw new Error(`no code in the outbox for ${email}`);
      return m[1]!;
    },

    /** Signs in by e-mail code: StartSignIn -> outbox -> CompleteSignIn. */
    async session(user: Pick<TestUser, "email">): Promise<string> {
      const { challengeId } = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ email: user.email }));
      const res = await stack.clients.grants.completeSignIn({ challengeId, code: await f.code(user.email) });
      return res.sessionToken;
    },

    /** Steps a session up: StartSignIn{sessionToken} -> outbox -> CompleteSignIn{..., sessionToken}. */
    async stepUp(user: Pick<TestUser, "email">, sessionToken: string): Promise<void> {
      const { challengeId } = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ sessionToken }));
      await stack.clients.grants.completeSignIn({ challengeId, code: await f.code(user.email), sessionToken });
    },

    async steppedUpSession(user: Pick<TestUser, "email">): Promise<string> {
      const s = await f.session(user);
      await f.stepUp(user, s);
      return s;
    },

    /**
     * A budget made by CreateBudget with an owner grant on the user's root vault: with a
     * step-up grant it is active at once, without one it is a draft awaiting the owner.
     */
    async budget(user: TestUser, opts: { stepUp: boolean; stepUpAmountCents?: bigint; perTxCents?: bigint }) {
      const owner = await f.grant(user, { stepUp: opts.stepUp });
      const { budget } = await stack.clients.budgets.createBudget({
        accessToken: owner.accessToken,
        purpose: "trip",
        displayName: "Trust boundary budget",
        stepUpAmountCents: opts.stepUpAmountCents,
        amountCapCentsPerTx: opts.perTxCents,
        chainAllowlist: ["base"],
        idempotencyKey: `tb-${randomUUID()}`,
      });
      return { owner, agentPrincipalId: budget!.agentPrincipalId, vaultId: budget!.vaultId };
    },

    /** An active, funded budget vault with an agent grant on it (accepting policy up to the caps). */
    async fundedBudget(user: TestUser, opts: { stepUpAmountCents?: bigint; fundCents?: bigint } = {}) {
      const b = await f.budget(user, { stepUp: true, stepUpAmountCents: opts.stepUpAmountCents });
      await stack.admin.budgets.fundVault({ vaultId: b.vaultId, amountCents: opts.fundCents ?? 100_000n });
      const agent = await f.grant(user, { vaultId: b.vaultId });
      return { ...b, agent };
    },

    /** A payment over the budget's step-up amount: PENDING_STEP_UP, waiting for the owner. */
    async pendingPayment(user: TestUser) {
      const b = await f.fundedBudget(user, { stepUpAmountCents: 5_000n });
      const { payment } = await stack.clients.budgets.initiatePayment({ accessToken: b.agent.accessToken, payment: paymentInit({ amountCents: 7_500n }) });
      return { ...b, paymentId: payment!.paymentId };
    },

    /** A partner (all scopes entitled) with a token minted by IssueToken. */
    async partner(opts: { entitlements?: string[]; scope?: string } = {}): Promise<TestPartner & { token: string }> {
      const p = await createPartner(stack as TestStack, { entitlements: opts.entitlements ?? [...PARTNER_SCOPES] });
      const res = await stack.clients.partners.issueToken({ clientId: p.clientId, clientSecret: p.clientSecret, scope: opts.scope });
      return { ...p, token: res.accessToken };
    },

    /** A partner with a bound treasury, a consenting recipient, and one executed payout. */
    async partnerWithPayout() {
      const p = await f.partner();
      const payer = await bindTreasury(stack.admin, p);
      const recipient = await createRecipient(stack.admin, p);
      const req = batchRequest(p, payer, [{ recipientUserId: recipient }]);
      await stack.clients.treasury.executeBatch(req);
      return { partner: p, payer, recipient, payoutId: req.items[0]!.payoutId };
    },

    /** A dynamically registered OAuth client (RegisterClient, no gateway); `public` registers auth method none. */
    async oauthClient(scope = ALL_AGENT_SCOPES.join(" "), opts: { public?: boolean } = {}) {
      const res = await stack.clients.grants.registerClient({
        clientName: "Trust boundary agent",
        redirectUris: ["http://127.0.0.1:9/callback"],
        grantTypes: ["authorization_code", "refresh_token"],
        responseTypes: ["code"],
        tokenEndpointAuthMethod: opts.public ? "none" : "client_secret_post",
        scope,
      });
      return { clientId: res.client!.clientId, clientSecret: res.clientSecret, redirectUri: "http://127.0.0.1:9/callback" };
    },

    /** An authorization request for `client` (PKCE S256), as CheckAuthorization takes it. */
    authRequest(client: { clientId: string; redirectUri: string }, opts: { scope?: string; vaultId?: string } = {}) {
      const verifier = randomBytes(32).toString("base64url");
      const challenge = createHashB64(verifier);
      return {
        verifier,
        request: {
          clientId: client.clientId,
          redirectUri: client.redirectUri,
          scope: opts.scope ?? "accounts:read",
          resources: opts.vaultId ? [`urn:vaultgate:vault:${opts.vaultId}`] : [],
          codeChallenge: challenge,
          codeChallengeMethod: "S256",
          sessionToken: "",
        },
      };
    },

    /** Consent by the user's session: ApproveAuthorization -> an authorization code. */
    async authorizationCode(user: TestUser, client: { clientId: string; redirectUri: string }, scope = "accounts:read") {
      const session = await f.session(user);
      const { verifier, request } = f.authRequest(client, { scope, vaultId: user.vaultId });
      const res = await stack.clients.grants.approveAuthorization({ request, sessionToken: session, vaultId: user.vaultId });
      return { code: res.code, verifier, session };
    },

    /** A grant issued to an OAuth client through the authorization-code flow. */
    async clientGrant(user: TestUser, client: { clientId: string; clientSecret: string; redirectUri: string }) {
      const { code, verifier } = await f.authorizationCode(user, client);
      const res = await stack.clients.grants.exchangeCode({
        clientId: client.clientId,
        clientSecret: client.clientSecret,
        code,
        redirectUri: client.redirectUri,
        codeVerifier: verifier,
      });
      return { accessToken: res.token!.accessToken, refreshToken: res.token!.refreshToken, grantId: res.token!.jti };
    },

    /** The agent principal (act.sub) an access token acts as. */
    agentOf(token: string): string {
      return (decodeJwt(token).payload.act as { sub: string }).sub;
    },
  };
  return f;
}

export type Fixtures = ReturnType<typeof fixtures>;

function createHashB64(verifier: string): string {
  return createHash("sha256").update(verifier).digest("base64url");
}

/** A payment request (Connect init shape) on chain base in USD. */
export function paymentInit(o: { amountCents?: bigint; idempotencyKey?: string } = {}) {
  return {
    counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
    amountCents: o.amountCents ?? 100n,
    currency: "USD",
    idempotencyKey: o.idempotencyKey ?? `tb-pay-${randomUUID()}`,
  };
}

/** The same payment request in proto-loader's wire shape (snake_case). */
export function paymentWire(o: { amountCents?: number; idempotencyKey?: string } = {}) {
  return {
    counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
    amount_cents: String(o.amountCents ?? 100),
    currency: "USD",
    idempotency_key: o.idempotencyKey ?? `tb-pay-${randomUUID()}`,
  };
}
