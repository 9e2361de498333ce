import { randomInt, randomUUID } from "node:crypto";
import { canonicalEmail, storedEmailSpellings } from "../../lib/email.js";
import type { HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { CompleteSignInRequest, StartSignInRequest } from "../../gen/vaultgate/grants/v1/signin_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import { callFacts } from "../context.js";
import { constantTimeEqual, hmacSha256 } from "../../lib/crypto.js";
import { deriveKey } from "../keys/outside-keys.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import { UUID } from "../../lib/uuid.js";
import { limitFlowStart, type FlowSession, type FlowStartLimit } from "./flow-starts.js";
import type { Outbox } from "./outbox.js";
import { openSession, type SessionVerifier } from "./sessions.js";
import type { SignInStore } from "./signin-store.js";
import type { KnownBrowsers } from "./known-browsers.js";
import type { UsersStore } from "./users-store.js";

/** How long a web session lasts, however the person signed in. */
export const SESSION_TTL_MS = 12 * 3600_000;
/** Stands in for the user an unknown address does not have: its lookup finds no row. */
const NO_USER = "00000000-0000-0000-0000-000000000000";
/** A code and a step-up count for 10 minutes. */
const OTP_TTL_MS = 10 * 60_000;
const OTP_MAX_ATTEMPTS = 5;
/**
 * Wrong codes per budget (codeBudget: the account, a known browser or a session) per 15 minutes,
 * from however many challenges and addresses; past it that budget's codes answer 429, even the
 * right one, until the oldest wrong code leaves the window.
 */
const OTP_WRONG_PER_BUDGET = 10;
const OTP_WRONG_WINDOW_SECONDS = 900;
/**
 * Codes e-mailed per budget (codeBudget): one per 30 s and 10 an hour, which lets a person do
 * a few authorizations in a row while bounding mail to one address.
 */
const OTP_SEND_GAP_SECONDS = 30;
const OTP_SENDS_PER_HOUR = 10;

export interface SignInDeps {
  db: Db;
  store: SignInStore;
  users: UsersStore;
  sessions: SessionVerifier;
  outbox: Outbox;
  rateLimits: RateLimitStore;
  audit: AuditStore;
  clock: () => Date;
  logger: Logger;
  /** Keyed hash of a challenge's code (createCodeHasher): the database alone cannot reverse a six-digit code. */
  hashCode: CodeHasher;
  browsers: KnownBrowsers;
  /** False when SIGNIN_METHODS leaves out email: the code RPCs refuse instead of mailing codes. */
  emailCodesOffered?: boolean;
  /** Starts are limited per session, and without one per client address (core/identity/flow-starts.ts). */
  flowStarts: FlowStartLimit;
}

export type CodeHasher = (challengeId: string, code: string) => string;

/** Sign-in codes are stored as an HMAC under a key derived from the outside key. */
export function createCodeHasher(signinCodeKey: Buffer): CodeHasher {
  const key = deriveKey(signinCodeKey, "sign-in code hash");
  return (challengeId, code) => hmacSha256(key, `${challengeId}:${code}`);
}

function audit(deps: SignInDeps, conn: Parameters<AuditStore["append"]>[0], ctx: HandlerContext, e: { actor: string; action: string; subject?: string }) {
  return deps.audit.append(conn, {
    ...callFacts(ctx),
    outcome: "success",
    ...e,
    at: deps.clock(),
  });
}

/**
 * Whose limits a code spends: a step-up its session's, a known browser its own, anyone else the
 * account's. Outsiders who spend an account's budget so cannot lock out a person in their own browser.
 */
function codeBudget(deps: SignInDeps, sessionId: string | null, userId: string | null, account: string, browserToken: string): string {
  if (sessionId) return `session:${sessionId}`;
  const browser = deps.browsers.browserOf(browserToken, userId);
  return browser ? `browser:${browser}` : account;
}

/** A deployment that offers only its provider must not let anyone in by an e-mailed code. */
function refuseIfNotOffered(deps: SignInDeps) {
  if (deps.emailCodesOffered === false) fail(Reason.ACCESS_DENIED, "this deployment does not offer sign-in by e-mailed code");
}

/** GrantsService.StartSignIn: e-mails a one-time code to sign in, or (with a session) to step up. */
export async function startSignIn(deps: SignInDeps, req: StartSignInRequest, ctx: HandlerContext) {
  refuseIfNotOffered(deps);
  const s = req.sessionToken ? await deps.sessions.verify(req.sessionToken) : undefined;
  const email = s ? (canonicalEmail(s.email) ?? s.email) : (canonicalEmail(req.email) ?? fail(Reason.INVALID_REQUEST, "enter a valid e-mail address"));
  // Looked up once, for a known and an unknown address alike (also an account stored under an older
  // spelling, as provider sign-in finds it); an inactive one counts as none.
  const account = s ? s.userId : await activeAccountAt(deps, req.email);
  // A browser this account signed in with spends only its own send budget: others on its network (an
  // office behind one address) cannot spend its starts.
  if (!s && account && deps.browsers.browserOf(req.browserToken, account)) return sendCode(deps, req, ctx, email, undefined, account);
  // Every start writes a challenge row, for unknown addresses too: one client varying the address
  // must not write rows (or mail accounts) at request rate, so starts share the flow-start limit.
  return limitFlowStart(deps.flowStarts, ctx, s, (_purpose, session) => sendCode(deps, req, ctx, email, session, account));
}

/** The active account at `address`, or null (none, or not active). */
async function activeAccountAt(deps: SignInDeps, address: string): Promise<string | null> {
  const user = await deps.users.findByStoredEmail(deps.db, storedEmailSpellings(address));
  return user?.status === "active" ? user.id : null;
}

/**
 * A challenge for `email` (or the session's step-up), its code mailed when `account` is set. Unknown
 * or inactive addresses get a challenge that can never succeed, limited exactly like known ones.
 */
async function sendCode(deps: SignInDeps, req: StartSignInRequest, ctx: HandlerContext, email: string, s: FlowSession | undefined, account: string | null) {
  const now = deps.clock();
  const id = randomUUID();
  const code = String(randomInt(0, 1_000_000)).padStart(6, "0");
  let userId = account;
  const sessionId = s?.sessionId ?? null;
  const purpose = sessionId ? "step_up" : "sign_in";
  const budget = codeBudget(deps, sessionId, userId, email, req.browserToken);
  const gapKey = `otp-send-gap:${purpose}:${budget}`;
  const sendKey = `otp-send:${budget}`;
  const gap = await deps.rateLimits.hit(gapKey, 1, OTP_SEND_GAP_SECONDS, now);
  const limit = gap.allowed ? await deps.rateLimits.hit(sendKey, OTP_SENDS_PER_HOUR, 3600, now) : gap;
  if (!limit.allowed) {
    // Nothing was sent: the 30 s gap does not start.
    if (gap.allowed) await deps.rateLimits.release(gapKey, now);
    fail(
      Reason.RATE_LIMITED,
      `${gap.allowed ? "too many codes were sent to this address" : "a code was sent to this address moments ago"}; try again in ${waitText(limit.retryAfterSeconds)}`,
      {
        retryAfterSeconds: limit.retryAfterSeconds,
      },
    );
  }
  const expiresAt = new Date(now.getTime() + OTP_TTL_MS);
  // Every start sends the same statements, whether or not the address has an account: the
  // answer is the same for both, and its timing must not tell them apart either (docs/reference/agent-oauth.md).
  await deps.db
    .transaction(async (trx) => {
      // A deactivation or new address committed since the user was read retired its codes: this one is not sent either.
      const held = await deps.users.holdUser(trx, userId ?? NO_USER);
      if (held?.status !== "active" || (canonicalEmail(held.email) ?? held.email) !== email) userId = null;
      await deps.store.insertChallenge(trx, {
        id,
        userId,
        sessionId,
        purpose,
        account: email,
        codeHash: deps.hashCode(id, code),
        attempts: 0,
        createdAt: now,
        expiresAt,
        consumedAt: null,
      });
      const what = sessionId ? "confirm (step-up)" : "sign in to";
      const message = {
        email,
        subject: `Your Vaultgate code: ${code}`,
        body: `Use ${code} to ${what} Vaultgate. It expires in 10 minutes. If you did not ask for it, ignore this message.`,
        at: now,
        expiresAt,
      };
      await deps.outbox.send(trx, message, userId !== null);
      const action = sessionId ? "web.step_up.start" : "web.sign_in.start";
      await audit(deps, trx, ctx, { actor: userId ? `user:${userId}` : "anonymous", action, subject: id });
    })
    .catch(async (err: unknown) => {
      // Nothing was queued: the send is not counted, so asking again is not told a code went out moments ago.
      await deps.rateLimits.release(gapKey, now).catch(() => {});
      await deps.rateLimits.release(sendKey, now).catch(() => {});
      throw err;
    });
  // The code itself never reaches a log line; `vaultgate dev outbox` shows it.
  if (userId && deps.outbox.mode === "dev")
    deps.logger.info({ challenge: id }, "dev outbox: a one-time code was queued; run `vaultgate dev outbox --email <address>`");
  return { challengeId: id };
}

/** GrantsService.CompleteSignIn: the code opens a web session, or marks the session's step-up. */
export async function completeSignIn(deps: SignInDeps, req: CompleteSignInRequest, ctx: HandlerContext) {
  refuseIfNotOffered(deps);
  if (!UUID.test(req.challengeId)) fail(Reason.INVALID_GRANT, "the code is invalid or expired");
  const now = deps.clock();
  const stepUpSession = req.sessionToken ? await deps.sessions.verify(req.sessionToken) : undefined;
  const found = await deps.store.findChallenge(deps.db, req.challengeId);
  if (!found?.account) fail(Reason.INVALID_GRANT, "the code is invalid or expired");
  // A slot among the account's wrong codes is taken before the code is compared, so
  // concurrent guesses can never check more than the limit; a guess that turns out not
  // to be wrong gives its slot back.
  const account = found.account;
  const budget = codeBudget(deps, stepUpSession?.sessionId ?? null, found.userId, account, req.browserToken);
  const slotKey = `otp-wrong:${budget}`;
  const slot = await deps.rateLimits.hit(slotKey, OTP_WRONG_PER_BUDGET, OTP_WRONG_WINDOW_SECONDS, now);
  if (!slot.allowed) {
    fail(Reason.RATE_LIMITED, `too many wrong codes were entered for this account; code sign-in is paused for ${waitText(slot.retryAfterSeconds)}`, {
      retryAfterSeconds: slot.retryAfterSeconds,
    });
  }
  const outcome = await deps.db
    .transaction(async (trx) => {
      const c = await deps.store.lockChallenge(trx, req.challengeId);
      if (!c || c.consumedAt || c.expiresAt.getTime() <= now.getTime() || c.attempts >= OTP_MAX_ATTEMPTS) return { ok: false as const, wrong: false };
      if ((c.purpose === "step_up") !== Boolean(stepUpSession) || (stepUpSession && stepUpSession.sessionId !== c.sessionId))
        return { ok: false as const, wrong: false };
      await deps.store.countAttempt(trx, c.id);
      // The code is hashed for a challenge no account can pass as well: the same work either way.
      const right = constantTimeEqual(deps.hashCode(c.id, req.code.trim()), c.codeHash);
      if (!c.userId || !right) return { ok: false as const, wrong: true, userId: c.userId };
      await deps.store.consumeChallenge(trx, c.id, now);
      if (stepUpSession) {
        await deps.store.setStepUp(trx, stepUpSession.sessionId, now);
        await audit(deps, trx, ctx, { actor: `user:${c.userId}`, action: "web.step_up" });
        return { ok: true as const, token: "", userId: c.userId };
      }
      const token = await openSession(deps.store, trx, c.userId, now, SESSION_TTL_MS, req.replacesSessionToken);
      await audit(deps, trx, ctx, { actor: `user:${c.userId}`, action: "web.sign_in" });
      return { ok: true as const, token, userId: c.userId };
    })
    .catch(async (err: unknown) => {
      await deps.rateLimits.release(slotKey, now).catch(() => {});
      throw err;
    });
  if (!outcome.wrong) await deps.rateLimits.release(slotKey, now);
  if (!outcome.ok) {
    // The wrong code that filled the window tells the account holder, at most once per window:
    // the window slides, so without its own limit every refill by an outsider would be a message.
    // An address with no account goes through the same steps, its message inserting no row.
    const notice =
      outcome.wrong && slot.count >= OTP_WRONG_PER_BUDGET
        ? await deps.rateLimits.hit(`otp-lock-notice:${budget}`, 1, OTP_WRONG_WINDOW_SECONDS, now)
        : undefined;
    if (notice?.allowed) {
      const ends = (await deps.rateLimits.windowEnd(slotKey, OTP_WRONG_WINDOW_SECONDS)) ?? new Date(now.getTime() + OTP_WRONG_WINDOW_SECONDS * 1000);
      const until = ends.toISOString().slice(11, 16);
      const message = {
        email: account,
        subject: "Vaultgate: code sign-in paused",
        body:
          budget === account
            ? `Someone tried codes for your account; code sign-in is paused until ${until} UTC, except in browsers you signed in with before. If it was not you, your account is safe: no code was accepted.`
            : `Someone tried codes for your account in a browser you signed in with; codes there are paused until ${until} UTC. No code was accepted.`,
        at: now,
      };
      await deps.outbox.send(deps.db, message, Boolean(outcome.userId));
      deps.logger.warn({ user: outcome.userId ?? null }, "code sign-in paused for an address after too many wrong codes");
    }
    fail(Reason.INVALID_GRANT, "the code is invalid or expired");
  }
  if (!outcome.token) return { sessionToken: "", expiresIn: 0n, browserToken: "" };
  return { sessionToken: outcome.token, expiresIn: BigInt(SESSION_TTL_MS / 1000), browserToken: deps.browsers.issue(outcome.userId) };
}

/** "25 seconds" below two minutes, else whole minutes. */
function waitText(seconds: number): string {
  if (seconds < 120) return `${seconds} second${seconds === 1 ? "" : "s"}`;
  const minutes = Math.ceil(seconds / 60);
  return `${minutes} minutes`;
}
