import { randomBytes, randomUUID } from "node:crypto";
import type { Knex } from "knex";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { Db } from "../db/knex.js";
import { fail } from "../errors.js";
import { sha256Hex } from "../../lib/crypto.js";
import type { EndSessionRequest, GetSessionRequest } from "../../gen/vaultgate/grants/v1/signin_pb.js";
import { SIGNED_OUT_HANDOFF_SECONDS, type SignInStore } from "./signin-store.js";

/** A step-up counts for this long: approving money or access needs one this recent. */
export const STEP_UP_WINDOW_SECONDS = 600;

/** A signed-in person, as proven by the web session token they hold. */
export interface SignedIn {
  sessionId: string;
  userId: string;
  email: string;
  /** When the session last passed step-up; null when never. */
  stepUpAt: Date | null;
  /** True when that step-up is recent enough to approve money or access. */
  stepUpFresh: boolean;
}

/**
 * Turns a web session token into the signed-in user: core never takes a user id or step-up time
 * from its caller for owner actions, only the opaque token (stored as SHA-256).
 */
export function createSessionVerifier(deps: { db: Db; store: SignInStore; clock: () => Date }) {
  return {
    /**
     * The session's user, or INVALID_TOKEN ("not signed in") for a missing, ended, expired or inactive one;
     * with `endedWithinSeconds`, a session ended no longer ago than that still answers (sign-out only).
     */
    async verify(token: string, endedWithinSeconds?: number): Promise<SignedIn> {
      if (!token || token.length > 256) fail(Reason.INVALID_TOKEN, "not signed in");
      const row = await deps.store.findSession(deps.db, sha256Hex(token));
      const now = deps.clock().getTime();
      // Without the option any end refuses, whatever the clock of the replica that recorded it; with it, only a sign-out's.
      const graced = endedWithinSeconds !== undefined && row?.endReason === "signed_out";
      const ended = row?.endedAt ? !graced || now - row.endedAt.getTime() > endedWithinSeconds * 1000 : false;
      if (!row?.userActive || ended || row.expiresAt.getTime() <= now) fail(Reason.INVALID_TOKEN, "not signed in");
      const stepUpAt = row.stepUpAt;
      return {
        sessionId: row.id,
        userId: row.userId,
        email: row.email,
        stepUpAt,
        stepUpFresh: stepUpAt !== null && now - stepUpAt.getTime() <= STEP_UP_WINDOW_SECONDS * 1000,
      };
    },
  };
}

export type SessionVerifier = ReturnType<typeof createSessionVerifier>;

/**
 * Opens a web session for the user and answers its token: opaque, 256 random bits, stored only as its SHA-256.
 * `replaces` (the browser's previous session token, if any) ends in the same transaction: whoever copied it is out.
 */
export async function openSession(store: SignInStore, conn: Knex | Knex.Transaction, userId: string, at: Date, ttlMs: number, replaces = ""): Promise<string> {
  if (replaces) await store.endSession(conn, sha256Hex(replaces), at, "replaced");
  const token = `vgs_${randomBytes(32).toString("base64url")}`;
  await store.insertSession(conn, { id: randomUUID(), tokenHash: sha256Hex(token), userId, at, expiresAt: new Date(at.getTime() + ttlMs) });
  return token;
}

export interface SessionRpcDeps {
  db: Db;
  sessions: SessionVerifier;
  store: SignInStore;
  clock: () => Date;
}

/** GrantsService.GetSession: who the session token's holder is, and how fresh their step-up. */
export async function getSession(deps: Pick<SessionRpcDeps, "sessions">, req: GetSessionRequest) {
  const s = await deps.sessions.verify(req.sessionToken);
  return {
    session: {
      userId: s.userId,
      email: s.email,
      stepUpAt: s.stepUpAt ? BigInt(Math.floor(s.stepUpAt.getTime() / 1000)) : 0n,
      stepUpFresh: s.stepUpFresh,
    },
  };
}

/** GrantsService.EndSession: signs out, answering a handoff that ends the user's session on the other web hosts. */
export async function endSession(deps: SessionRpcDeps & { handoffs: { mint(userId: string): Promise<string> } }, req: EndSessionRequest) {
  // The holder of a live session, or of one just signed out whose sign-out was repeated: a handoff can
  // only end that same user's sessions, so a token that once was theirs risks a sign-out, never access.
  const s = await deps.sessions.verify(req.sessionToken, SIGNED_OUT_HANDOFF_SECONDS);
  await deps.store.endSession(deps.db, sha256Hex(req.sessionToken), deps.clock(), "signed_out");
  return { signoutHandoff: await deps.handoffs.mint(s.userId) };
}
