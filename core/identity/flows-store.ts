import type { Knex } from "knex";
import { pruneBatchSql } from "../db/sql.js";

type Conn = Knex | Knex.Transaction;

export type FlowMethod = "oidc" | "passkey";
export type FlowPurpose = "sign_in" | "step_up" | "register";

/** A browser flow as taken: what its callback or answer is checked against. */
export interface TakenFlow {
  id: string;
  purpose: FlowPurpose;
  sessionId: string | null;
  userId: string | null;
  state: string | null;
  nonce: string | null;
  codeVerifier: string | null;
  challenge: string | null;
  createdAt: Date;
}

/** SQL for single-use browser flows (provider sign-in and passkey ceremonies), found by their cookie's hash. */
export function createFlowsStore() {
  return {
    async insert(
      conn: Conn,
      f: {
        id: string;
        bindingHash: string;
        method: FlowMethod;
        purpose: FlowPurpose;
        sessionId?: string;
        userId?: string;
        state?: string;
        nonce?: string;
        codeVerifier?: string;
        challenge?: string;
        at: Date;
        expiresAt: Date;
      },
    ): Promise<void> {
      await conn("signin_flows").insert({
        id: f.id,
        binding_hash: f.bindingHash,
        method: f.method,
        purpose: f.purpose,
        session_id: f.sessionId ?? null,
        user_id: f.userId ?? null,
        state: f.state ?? null,
        nonce: f.nonce ?? null,
        code_verifier: f.codeVerifier ?? null,
        challenge: f.challenge ?? null,
        created_at: f.at,
        expires_at: f.expiresAt,
      });
    },

    /** Marks the unexpired, unused flow consumed and returns it: a flow is taken once, whatever its answer. */
    async take(conn: Conn, q: { bindingHash: string; method: FlowMethod; purpose?: FlowPurpose; at: Date }): Promise<TakenFlow | undefined> {
      const taken = conn("signin_flows")
        .update({ consumed_at: q.at })
        .where({ binding_hash: q.bindingHash, method: q.method })
        .whereNull("consumed_at")
        .where("expires_at", ">", q.at)
        .returning(["id", "purpose", "session_id", "user_id", "state", "nonce", "code_verifier", "challenge", "created_at"]);
      if (q.purpose) taken.where({ purpose: q.purpose });
      const row = ((await taken) as Record<string, unknown>[])[0];
      if (!row) return undefined;
      const text = (v: unknown) => (v == null ? null : String(v));
      return {
        id: String(row.id),
        purpose: row.purpose as FlowPurpose,
        sessionId: text(row.session_id),
        userId: text(row.user_id),
        state: text(row.state),
        nonce: text(row.nonce),
        codeVerifier: text(row.code_verifier),
        challenge: text(row.challenge),
        createdAt: new Date(row.created_at as string),
      };
    },
  };
}

export type FlowsStore = ReturnType<typeof createFlowsStore>;

/** The pruner's batch: browser flows that expired before the cutoff. */
export const PRUNE_SIGNIN_FLOWS = { table: "signin_flows", sql: pruneBatchSql("signin_flows", "expires_at < ?", "expires_at") } as const;
