import type { Knex } from "knex";
import { pruneBatchSql } from "../db/sql.js";

/** A sign-out repeated this soon after its session ended (a double click, a lost answer) still hands off. */
export const SIGNED_OUT_HANDOFF_SECONDS = 600;

type Conn = Knex | Knex.Transaction;

export interface ChallengeRecord {
  id: string;
  userId: string | null;
  sessionId: string | null;
  purpose: "sign_in" | "step_up";
  /** The normalised e-mail address the code went to: wrong codes are limited per account. */
  account: string | null;
  codeHash: string;
  attempts: number;
  expiresAt: Date;
  consumedAt: Date | null;
}

export interface SessionRecord {
  id: string;
  userId: string;
  email: string;
  userActive: boolean;
  expiresAt: Date;
  stepUpAt: Date | null;
  endedAt: Date | null;
  endReason: SessionEndReason | null;
}

/** Why a session ended: its holder signed out, a new sign-in in its browser replaced it, or the account changed. */
export type SessionEndReason = "signed_out" | "replaced" | "account_change";

/** SQL for one-time sign-in codes and the web sessions they open. */
export function createSignInStore() {
  return {
    async insertSession(conn: Conn, s: { id: string; tokenHash: string; userId: string; at: Date; expiresAt: Date }): Promise<void> {
      await conn("web_sessions").insert({ id: s.id, token_hash: s.tokenHash, user_id: s.userId, created_at: s.at, expires_at: s.expiresAt });
    },

    /** The session with this token hash and its user, live or not: the caller judges it. */
    async findSession(conn: Conn, tokenHash: string): Promise<SessionRecord | undefined> {
      const row = await conn("web_sessions as s")
        .join("users as u", "u.id", "s.user_id")
        .where({ "s.token_hash": tokenHash })
        .first("s.id", "s.user_id", "u.email", "u.status", "s.expires_at", "s.step_up_at", "s.ended_at", "s.end_reason");
      if (!row) return undefined;
      return {
        id: String(row.id),
        userId: String(row.user_id),
        email: String(row.email),
        userActive: row.status === "active",
        expiresAt: new Date(row.expires_at),
        stepUpAt: row.step_up_at ? new Date(row.step_up_at) : null,
        endedAt: row.ended_at ? new Date(row.ended_at) : null,
        endReason: row.end_reason ?? null,
      };
    },

    async setStepUp(conn: Conn, sessionId: string, at: Date): Promise<void> {
      await conn("web_sessions").where({ id: sessionId }).update({ step_up_at: at });
    },

    async endSession(conn: Conn, tokenHash: string, at: Date, reason: Exclude<SessionEndReason, "account_change">): Promise<void> {
      await conn("web_sessions").where({ token_hash: tokenHash }).whereNull("ended_at").update({ ended_at: at, end_reason: reason });
    },

    /** Ends every open session of the user; answers how many. */
    async endUserSessions(conn: Conn, userId: string, at: Date): Promise<number> {
      return conn("web_sessions").where({ user_id: userId }).whereNull("ended_at").update({ ended_at: at, end_reason: "account_change" });
    },

    /** Expires the user's unused codes (sign-in and step-up): they were mailed to an address the user may no longer have. */
    async retireUserCodes(conn: Conn, userId: string, at: Date): Promise<void> {
      await conn("signin_challenges").where({ user_id: userId }).whereNull("consumed_at").where("expires_at", ">", at).update({ expires_at: at });
    },

    async insertChallenge(conn: Conn, c: ChallengeRecord & { createdAt: Date }): Promise<void> {
      await conn("signin_challenges").insert({
        id: c.id,
        user_id: c.userId,
        session_id: c.sessionId,
        purpose: c.purpose,
        account: c.account,
        code_hash: c.codeHash,
        attempts: c.attempts,
        created_at: c.createdAt,
        expires_at: c.expiresAt,
      });
    },

    async lockChallenge(trx: Knex.Transaction, id: string): Promise<ChallengeRecord | undefined> {
      const row = await trx("signin_challenges").where({ id }).forUpdate().first();
      return row ? challengeRecord(row) : undefined;
    },

    async findChallenge(conn: Conn, id: string): Promise<ChallengeRecord | undefined> {
      const row = await conn("signin_challenges").where({ id }).first();
      return row ? challengeRecord(row) : undefined;
    },

    async countAttempt(conn: Conn, id: string): Promise<void> {
      await conn("signin_challenges").where({ id }).increment("attempts", 1);
    },

    async consumeChallenge(conn: Conn, id: string, at: Date): Promise<void> {
      await conn("signin_challenges").where({ id }).update({ consumed_at: at });
    },
  };
}

export type SignInStore = ReturnType<typeof createSignInStore>;

function challengeRecord(row: Record<string, unknown>): ChallengeRecord {
  return {
    id: String(row.id),
    userId: row.user_id == null ? null : String(row.user_id),
    sessionId: row.session_id == null ? null : String(row.session_id),
    purpose: row.purpose as ChallengeRecord["purpose"],
    account: row.account == null ? null : String(row.account),
    codeHash: String(row.code_hash),
    attempts: Number(row.attempts),
    expiresAt: new Date(row.expires_at as string),
    consumedAt: row.consumed_at ? new Date(row.consumed_at as string) : null,
  };
}

/** The pruner's batch: one-time codes that expired before the cutoff. */
export const PRUNE_SIGNIN_CHALLENGES = { table: "signin_challenges", sql: pruneBatchSql("signin_challenges", "expires_at < ?", "expires_at") } as const;

/** The pruner's batch: sessions expired or ended before the cutoff that no live challenge still names. */
export const PRUNE_WEB_SESSIONS = {
  table: "web_sessions",
  sql: `DELETE FROM web_sessions WHERE id IN (
            SELECT s.id FROM (
              (SELECT id FROM web_sessions WHERE expires_at < ? ORDER BY expires_at LIMIT ?)
              UNION (SELECT id FROM web_sessions WHERE ended_at IS NOT NULL AND ended_at < ? ORDER BY ended_at LIMIT ?)) s
             WHERE NOT EXISTS (SELECT 1 FROM signin_challenges c WHERE c.session_id = s.id)
             LIMIT ?) RETURNING 1`,
  // A signed-out session stays while a repeated sign-out may still hand off.
  bindings: (cutoff: Date, batch: number) => [cutoff, batch, new Date(cutoff.getTime() - SIGNED_OUT_HANDOFF_SECONDS * 1000), batch, batch],
} as const;
