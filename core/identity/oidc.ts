import { randomBytes, randomUUID } from "node:crypto";
import { storedEmailSpellings } from "../../lib/email.js";
import * as client from "openid-client";
import type { Knex } from "knex";
import type { Logger } from "pino";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { AuditStore } from "../audit/store.js";
import type { Db } from "../db/knex.js";
import { fail } from "../errors.js";
import { CLOCK_SKEW_SECONDS } from "../../lib/clock.js";
import { sha256Hex } from "../../lib/crypto.js";
import { quotedExcerpt, textProblem } from "../../lib/text.js";
import { createFlowsStore } from "./flows-store.js";
import { openSession } from "./sessions.js";
import { createSignInStore } from "./signin-store.js";
import { createUsersStore } from "./users-store.js";

export interface OidcProviderSettings {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** A step-up counts only when the token's `acr`, or one of its `amr`, is one of these (none = any fresh sign-in). */
  stepUpAcr: string[];
}

export interface OidcDeps {
  db: Db;
  audit: AuditStore;
  clock: () => Date;
  logger: Logger;
  provider: OidcProviderSettings;
  /** Where the provider sends the browser back: APP_URL + /signin/oidc/callback. */
  redirectUri: string;
  /** How long a web session made here lasts. */
  sessionTtlMs: number;
  /** How long a person has at the provider before the flow is void. */
  flowTtlMs?: number;
  /** Discovery and token requests give up after this many seconds. */
  timeoutSeconds?: number;
  /** How long discovered metadata stands before the next flow reads it again (default 60 s). */
  metadataTtlMs?: number;
}

/** Who asked, for the audit rows (core fills these from the call). */
export interface CallFacts {
  requestId: string;
  clientAddress?: string;
}

export type OidcPurpose = "sign_in" | "step_up";

/** A started flow: send the browser to `authorizationUrl`, keep `binding` in a cookie until the callback. */
export interface StartedFlow {
  authorizationUrl: string;
  binding: string;
  expiresAt: Date;
}

export type CompletedFlow =
  | { purpose: "sign_in"; userId: string; sessionToken: string; expiresIn: number }
  | { purpose: "step_up"; userId: string; sessionId: string };

/** The session a step-up is for, as core verified it from the session token. */
export interface StepUpSession {
  sessionId: string;
  userId: string;
}

/**
 * Sign-in and step-up through a company's OpenID Connect provider (code flow, PKCE, state, nonce,
 * ID token checks). A flow completes once, only in the browser whose cookie started it.
 */
export function createOidcSignin(deps: OidcDeps) {
  const { db, provider } = deps;
  const flows = createFlowsStore();
  const users = createUsersStore();
  const sessionsStore = createSignInStore();
  const flowTtlMs = deps.flowTtlMs ?? 10 * 60_000;
  const issuerUrl = new URL(provider.issuer);
  const metadataTtlMs = deps.metadataTtlMs ?? 60_000;
  let configuration: Promise<client.Configuration> | undefined;
  let discoveredAt = 0;

  /**
   * Discovery, shared by every flow for a minute; a failure is tried again on the next flow.
   * The redirect to the provider never touches it, so this re-read is how a provider that went
   * down is answered with the outage page rather than a browser error at the provider's address.
   */
  function config(): Promise<client.Configuration> {
    const now = deps.clock().getTime();
    if (configuration && now - discoveredAt >= metadataTtlMs) configuration = undefined;
    if (!configuration) discoveredAt = now;
    configuration ??= client
      .discovery(issuerUrl, provider.clientId, undefined, client.ClientSecretBasic(provider.clientSecret), {
        // ID tokens are verified against the provider's keys even though they come over TLS.
        execute: [client.enableNonRepudiationChecks, ...(issuerUrl.protocol === "http:" ? [client.allowInsecureRequests] : [])],
        timeout: deps.timeoutSeconds ?? 10,
      })
      .catch((err: unknown) => {
        configuration = undefined;
        throw err;
      });
    return configuration.catch((err: unknown) => unreachable(err, "discovery"));
  }

  function unreachable(err: unknown, step: string): never {
    deps.logger.warn(
      { step, error: err instanceof Error ? `${err.name}: ${(err as { code?: string }).code ?? ""}` : "error" },
      "identity provider unreachable",
    );
    fail(Reason.PROVIDER_UNAVAILABLE, "your organisation's sign-in service cannot be reached right now; try again in a minute", { retryAfterSeconds: 30 }, err);
  }

  const audit = (
    conn: Knex | Knex.Transaction,
    facts: CallFacts,
    e: { actor: string; action: string; subject?: string; outcome: "success" | "failure"; reason?: string },
  ) => deps.audit.append(conn, { requestId: facts.requestId, clientAddress: facts.clientAddress, at: deps.clock(), ...e });

  /** Refuses the callback: audited, no session, and a message a person can act on. */
  async function refuse(facts: CallFacts, purpose: OidcPurpose, why: string, actor = "anonymous"): Promise<never> {
    await audit(db, facts, { actor, action: purpose === "step_up" ? "web.oidc.step_up" : "web.oidc.sign_in", outcome: "failure", reason: why });
    deps.logger.info({ reason: why }, "identity provider sign-in refused");
    fail(
      Reason.ACCESS_DENIED,
      purpose === "step_up"
        ? "your organisation's sign-in did not confirm it is you; try the confirmation again"
        : "signing in with your organisation did not work; start again from the sign-in page",
    );
  }

  /**
   * The user a subject not yet linked is linked to: the one with the address the provider says it
   * verified, also as stored before the current address rule (most exact spelling first, as the operator's lookup).
   */
  async function userOfVerifiedEmail(claims: client.IDToken): Promise<{ userId?: string; why: string }> {
    if (claims.email_verified !== true) return { why: "first sign-in without a verified e-mail address" };
    const spellings = typeof claims.email === "string" ? storedEmailSpellings(claims.email) : [];
    if (spellings.length === 0) return { why: "first sign-in without an e-mail address" };
    const user = await users.findByStoredEmail(db, spellings);
    return user ? { userId: user.id, why: "" } : { why: "no account for the provider's e-mail address" };
  }

  /**
   * Links the subject (linkNew) or notes its use, holding the user row. An address the provider moved to
   * another account must not carry the person's account with it: false when the user has another subject here.
   */
  async function linkOrTouch(
    trx: Knex.Transaction,
    facts: CallFacts,
    l: { userId: string; iss: string; sub: string; email: unknown; linkNew: boolean; at: Date },
  ): Promise<boolean> {
    if (!l.linkNew) {
      await users.touchLink(trx, l.iss, l.sub, l.at);
      return true;
    }
    const linked = await users.linkedSubject(trx, l.iss, l.userId);
    if (linked !== undefined && linked !== l.sub) return false;
    const email = typeof l.email === "string" ? l.email : null;
    const owner = await users.link(trx, { issuer: l.iss, subject: l.sub, userId: l.userId, email, at: l.at });
    if (owner !== l.userId) throw new Error("identity link raced to another user");
    await audit(trx, facts, { actor: `user:${l.userId}`, action: "web.oidc.link", subject: l.iss, outcome: "success" });
    return true;
  }

  function meetsStepUp(claims: client.IDToken): boolean {
    if (provider.stepUpAcr.length === 0) return true;
    const acr = typeof claims.acr === "string" ? [claims.acr] : [];
    const amr = Array.isArray(claims.amr) ? claims.amr.filter((v): v is string => typeof v === "string") : [];
    return [...acr, ...amr].some((v) => provider.stepUpAcr.includes(v));
  }

  return {
    /**
     * Starts a flow. A step-up asks the provider to authenticate the person afresh
     * (max_age=0, prompt=login) and, when configured, for the acr values a step-up needs.
     */
    async start(purpose: OidcPurpose, session?: StepUpSession): Promise<StartedFlow> {
      if ((purpose === "step_up") !== Boolean(session)) fail(Reason.INVALID_REQUEST, "a step-up needs a signed-in session, and only a step-up has one");
      const cfg = await config();
      const now = deps.clock();
      const binding = randomBytes(32).toString("base64url");
      const state = client.randomState();
      const nonce = client.randomNonce();
      const verifier = client.randomPKCECodeVerifier();
      const params: Record<string, string> = {
        redirect_uri: deps.redirectUri,
        scope: "openid email",
        response_type: "code",
        state,
        nonce,
        code_challenge: await client.calculatePKCECodeChallenge(verifier),
        code_challenge_method: "S256",
      };
      if (purpose === "step_up") {
        params.max_age = "0";
        params.prompt = "login";
        if (provider.stepUpAcr.length) params.acr_values = provider.stepUpAcr.join(" ");
      }
      const expiresAt = new Date(now.getTime() + flowTtlMs);
      await flows.insert(db, {
        id: randomUUID(),
        bindingHash: sha256Hex(binding),
        method: "oidc",
        purpose,
        sessionId: session?.sessionId,
        userId: session?.userId,
        state,
        nonce,
        codeVerifier: verifier,
        at: now,
        expiresAt,
      });
      return { authorizationUrl: client.buildAuthorizationUrl(cfg, params).href, binding, expiresAt };
    },

    /**
     * Completes a flow from the callback URL and the cookie binding: sign-in makes a session;
     * step-up marks the session the flow started for, if the provider's subject is linked to its user.
     */
    async complete(input: { callbackUrl: string; binding: string; session?: StepUpSession; replaces?: string }, facts: CallFacts): Promise<CompletedFlow> {
      const now = deps.clock();
      if (!input.binding || input.binding.length > 100)
        fail(Reason.ACCESS_DENIED, "this sign-in was started in another browser or has expired; start again from the sign-in page");
      // Taken once: a replayed callback (the same state again) finds the flow used.
      const flow = await flows.take(db, { bindingHash: sha256Hex(input.binding), method: "oidc", at: now });
      if (!flow) {
        await audit(db, facts, {
          actor: "anonymous",
          action: "web.oidc.callback",
          outcome: "failure",
          reason: "no unused flow for this browser (replayed, expired or started elsewhere)",
        });
        fail(Reason.ACCESS_DENIED, "this sign-in link was already used or has expired; start again from the sign-in page");
      }
      const purpose = flow.purpose as OidcPurpose;
      if (purpose === "step_up" && (!input.session || input.session.sessionId !== flow.sessionId)) {
        return refuse(facts, purpose, "step-up completed in another session", input.session ? `user:${input.session.userId}` : "anonymous");
      }
      const cfg = await config();
      let claims: client.IDToken;
      try {
        const tokens = await client.authorizationCodeGrant(cfg, new URL(input.callbackUrl), {
          pkceCodeVerifier: flow.codeVerifier ?? "",
          expectedState: flow.state ?? "",
          expectedNonce: flow.nonce ?? "",
          idTokenExpected: true,
        });
        claims = tokens.claims() ?? fail(Reason.INTERNAL, "no ID token");
      } catch (err) {
        // The provider answering 5xx (or not JSON with a 5xx) is an outage, not a bad token.
        const status =
          (err as { status?: number }).status ??
          ((err as { cause?: unknown }).cause instanceof Response ? (err as { cause: Response }).cause.status : undefined);
        // An outage seen here is checked again by the next flow's discovery, not trusted for a minute more.
        if (status !== undefined && status >= 500) {
          configuration = undefined;
          return unreachable(err, "token");
        }
        if (err instanceof client.AuthorizationResponseError) return refuse(facts, purpose, `provider answered ${quotedExcerpt(String(err.error), 60)}`);
        if (err instanceof client.ResponseBodyError) return refuse(facts, purpose, `token endpoint answered ${quotedExcerpt(String(err.error), 60)}`);
        if (err instanceof client.ClientError) return refuse(facts, purpose, `ID token or response invalid: ${quotedExcerpt(err.message, 120)}`);
        configuration = undefined;
        return unreachable(err, "token");
      }
      // Two checks openid-client leaves out: an ID token issued in the future, or for another client.
      if (!((claims.iat as number) * 1000 <= deps.clock().getTime() + CLOCK_SKEW_SECONDS * 1000)) {
        return refuse(facts, purpose, "ID token or response invalid: iat is in the future");
      }
      if (claims.azp !== undefined && claims.azp !== provider.clientId) return refuse(facts, purpose, "ID token or response invalid: azp names another client");
      // A subject is at most 255 characters of text: anything else could not be looked up or linked.
      if (!isSubject(claims.sub)) return refuse(facts, purpose, "ID token or response invalid: sub is not 1 to 255 characters of text");
      const iss = String(claims.iss);
      const sub = claims.sub;
      const linkedUserId = await users.findLinkedUser(db, iss, sub);

      if (purpose === "step_up") {
        const userId = flow.userId!;
        // A person who signed in another way is linked here by the same rule as a first sign-in.
        const byEmail = linkedUserId === undefined ? await userOfVerifiedEmail(claims) : undefined;
        if (linkedUserId !== userId && byEmail?.userId !== userId)
          return refuse(facts, purpose, byEmail?.why || "the provider signed in someone else", `user:${userId}`);
        const authTime = typeof claims.auth_time === "number" ? claims.auth_time * 1000 : undefined;
        if (authTime === undefined || authTime < flow.createdAt.getTime() - CLOCK_SKEW_SECONDS * 1000)
          return refuse(facts, purpose, "auth_time is not fresh", `user:${userId}`);
        if (!meetsStepUp(claims)) return refuse(facts, purpose, "acr/amr below the step-up requirement", `user:${userId}`);
        const done = await db.transaction(async (trx) => {
          await users.lockUser(trx, userId);
          if (!(await linkOrTouch(trx, facts, { userId, iss, sub, email: claims.email, linkNew: Boolean(byEmail), at: now }))) return false;
          await sessionsStore.setStepUp(trx, flow.sessionId!, now);
          await audit(trx, facts, { actor: `user:${userId}`, action: "web.step_up", subject: "oidc", outcome: "success" });
          return true;
        });
        if (!done) return refuse(facts, purpose, "the account is linked to another subject of this provider", `user:${userId}`);
        return { purpose, userId, sessionId: flow.sessionId! };
      }

      let userId: string;
      let linkNew = false;
      if (linkedUserId) userId = linkedUserId;
      else {
        const byEmail = await userOfVerifiedEmail(claims);
        if (!byEmail.userId) return refuse(facts, purpose, byEmail.why);
        userId = byEmail.userId;
        linkNew = true;
      }
      const user = await users.findById(db, userId);
      if (user?.status !== "active") return refuse(facts, purpose, "account not active", `user:${userId}`);
      const token = await db.transaction(async (trx) => {
        // The user row before the link, in every sign-in: first and later sign-ins of one person lock in one order.
        // Its status is read again under the lock: a deactivation that committed meanwhile has ended the user's sessions.
        if ((await users.lockUser(trx, userId))?.status !== "active") return "inactive";
        if (!(await linkOrTouch(trx, facts, { userId, iss, sub, email: claims.email, linkNew, at: now }))) return undefined;
        await audit(trx, facts, { actor: `user:${userId}`, action: "web.sign_in", subject: "oidc", outcome: "success" });
        return openSession(sessionsStore, trx, userId, now, deps.sessionTtlMs, input.replaces);
      });
      if (token === "inactive") return refuse(facts, purpose, "account not active", `user:${userId}`);
      if (token === undefined) return refuse(facts, purpose, "the account is linked to another subject of this provider", `user:${userId}`);
      return { purpose, userId, sessionToken: token, expiresIn: Math.floor(deps.sessionTtlMs / 1000) };
    },
  };
}

export type OidcSignin = ReturnType<typeof createOidcSignin>;

/** An ID token's `sub` as OpenID Connect bounds it (255 characters), with no control character or unpaired surrogate. */
function isSubject(sub: unknown): sub is string {
  return typeof sub === "string" && sub.length > 0 && sub.length <= 255 && textProblem(sub) === undefined && !/\p{Cc}/u.test(sub);
}
