import type { Knex } from "knex";
import type { Db } from "../../db/knex.js";
import { createGroupCommit } from "../../db/group-commit.js";
import { pgArray, prepared } from "../../db/sql.js";
import { UUID } from "../../../lib/uuid.js";
import { AUDIT_INSERT_SQL } from "../../audit/store.js";
import {
  AGENT_GRANT_JOIN,
  GRANT_COLUMNS,
  GRANT_REVOKED_SQL,
  GRANT_USER_INACTIVE_SQL,
  LINEAGE_GRANT_IDS,
  toAgentGrant,
  type AgentGrant,
  type RevokedGrants,
} from "../../grants/stores/budget-grants.js";
import { GRANT_USABLE_SQL } from "../../grants/usable.js";
import {
  spentTodaySql,
  toPayment,
  toPaymentContext,
  utcDay,
  VAULT_COLUMNS,
  type Conn,
  type PaymentContext,
  type PaymentRecord,
  type PaymentStatusName,
  type VaultRecord,
} from "../records.js";

/** One payments.simulate read; `audit` asks for its success row, written when the call answers. */
interface SimulateRead {
  grantId: string;
  dayStart: Date;
  audit?: { requestId: string; clientAddress: string; at: Date; currency: string };
  /** The caller's ctx.signal: aborted before a batch takes the read, it is withdrawn unwritten (see group commit). */
  signal?: AbortSignal;
}

/** SQL for agent payments: the decision's context, the payment rows, the spend totals. */
export function createPaymentsStore(db: Db) {
  // The simulate read, for many concurrent calls in one statement whose snapshot starts after
  // they all arrived; it also inserts each answering call's audit row under the checks the
  // service makes, so a row exists exactly when the call may answer, or the statement fails.
  const contextsWithAudit = prepared(
    "payment_context",
    `WITH ctx AS (
           SELECT k.n, k.k_audit, k.k_request_id, k.k_client_address, k.k_at, ${GRANT_COLUMNS}, ${VAULT_COLUMNS}, p.status AS p_status, p.amount_cap_cents_per_tx, p.amount_cap_cents_per_day, p.amount_cap_cents_lifetime,
                  p.step_up_amount_cents, p.chain_allowlist, p.time_window_end, p.vault_id AS p_vault_id,
                  ${spentTodaySql("(k.day_start AT TIME ZONE 'UTC')::date")} AS spent_today, v.spent_lifetime_cents AS spent_lifetime,
                  (${GRANT_USABLE_SQL("k.k_at")} AND v.owner_user_id = g.user_id AND v.currency = k.k_currency) AS answers
             FROM unnest(?::uuid[], ?::timestamptz[], ?::boolean[], ?::text[], ?::timestamptz[], ?::text[], ?::text[])
                  WITH ORDINALITY AS k(grant_id, day_start, k_audit, k_request_id, k_at, k_currency, k_client_address, n)
             ${AGENT_GRANT_JOIN("k.grant_id")}
             JOIN vaults v ON v.id = g.vault_id LEFT JOIN vault_policies p ON p.vault_id = v.id),
         audited AS (
           ${AUDIT_INSERT_SQL(`SELECT k_request_id, 'agent:' || g_agent_principal_id, 'payments.simulate', 'success', '', id::text, k_client_address, k_at
             FROM ctx WHERE k_audit AND answers ORDER BY n`)}
           RETURNING seq)
         SELECT ctx.*, (k_audit AND answers) AS audited FROM ctx`,
  );
  const unlockedContexts = createGroupCommit<SimulateRead, (PaymentContext & { grant: AgentGrant; audited: boolean }) | undefined>(
    async (keys) => {
      const rows = await contextsWithAudit(db, [
        pgArray(keys.map((k) => k.grantId)),
        pgArray(keys.map((k) => k.dayStart.toISOString())),
        pgArray(keys.map((k) => String(k.audit !== undefined))),
        pgArray(keys.map((k) => k.audit?.requestId ?? "")),
        pgArray(keys.map((k) => (k.audit?.at ?? k.dayStart).toISOString())),
        pgArray(keys.map((k) => k.audit?.currency ?? "")),
        pgArray(keys.map((k) => k.audit?.clientAddress ?? "")),
      ]);
      const found = new Map<number, Record<string, unknown>>();
      for (const r of rows) found.set(Number(r.n) - 1, r);
      return keys.map((_, i) => {
        const r = found.get(i);
        return r ? { ...toPaymentContext(r), grant: toAgentGrant(r), audited: r.audited === true } : undefined;
      });
    },
    { maxBatch: 256, maxInFlight: 2, name: "payment_context", signalOf: (k) => k.signal },
  );

  const lockedGrantAndVault = prepared(
    "locked_payment_context",
    `SELECT ${GRANT_COLUMNS}, ${VAULT_COLUMNS}, ${spentTodaySql("d.day")} AS spent_today, v.spent_lifetime_cents AS spent_lifetime
       FROM (SELECT ?::date AS day) d ${AGENT_GRANT_JOIN("?")} JOIN vaults v ON v.id = g.vault_id
      FOR NO KEY UPDATE OF g FOR UPDATE OF v`,
  );
  const policyOf = prepared(
    "payment_policy",
    `SELECT p.status AS p_status, p.amount_cap_cents_per_tx, p.amount_cap_cents_per_day, p.amount_cap_cents_lifetime,
            p.step_up_amount_cents, p.chain_allowlist, p.time_window_end, p.vault_id AS p_vault_id
       FROM (SELECT 1) one LEFT JOIN vault_policies p ON p.vault_id = ?`,
  );

  return {
    async findPayment(conn: Conn, vaultId: string, idempotencyKey: string): Promise<PaymentRecord | undefined> {
      const row = await conn("agent_payments").where({ vault_id: vaultId, idempotency_key: idempotencyKey }).first();
      return row ? toPayment(row) : undefined;
    },

    /**
     * Takes a completed payment off the vault's balance and adds it to the caps' running totals
     * in one UPDATE, holding the vault row FOR UPDATE, so the totals equal the completed payments at
     * every commit. vault_record_spend decides which UTC day (or only the lifetime) a payment counts towards.
     */
    async recordSpend(
      trx: Knex.Transaction,
      vault: Pick<VaultRecord, "id" | "currency">,
      payment: Pick<PaymentRecord, "id" | "amountCents">,
      at: Date,
    ): Promise<void> {
      // With the payment's ledger transaction (vault -> external:payments): migration 0020.
      await trx.raw(`SELECT vault_record_spend(?, ?, ?, ?, ?::date, ?)`, [vault.id, vault.currency, payment.id, payment.amountCents, utcDay(at), at]);
    },

    /**
     * Of these settled payments, those not to be signed: `stop` never (their budget closed or declined, or the grant
     * that made them revoked), `hold` not while their user's account is not active.
     */
    async withheldAmong(conn: Conn, payments: readonly { id: string; vaultId: string | null }[]): Promise<Map<string, "stop" | "hold">> {
      if (payments.length === 0) return new Map();
      const { rows } = await conn.raw(
        `SELECT id, stop FROM (
           SELECT s.id,
                  EXISTS (SELECT 1 FROM budgets b WHERE b.vault_id = s.vault_id AND b.status IN ('closed', 'declined'))
                  OR ${GRANT_REVOKED_SQL("p.grant_id")} AS stop,
                  ${GRANT_USER_INACTIVE_SQL("p.grant_id")} AS hold
             FROM unnest(?::uuid[], ?::uuid[]) AS s(id, vault_id) LEFT JOIN agent_payments p ON p.id = s.id) v
          WHERE stop OR hold`,
        [pgArray(payments.map((p) => p.id)), pgArray(payments.map((p) => p.vaultId))],
      );
      return new Map((rows as { id: string; stop: boolean }[]).map((r) => [String(r.id), r.stop ? "stop" : "hold"]));
    },

    async findPaymentById(conn: Conn, id: string, lock = false): Promise<PaymentRecord | undefined> {
      const q = conn("agent_payments").where({ id }).first();
      const row = lock ? await q.forUpdate() : await q;
      return row ? toPayment(row) : undefined;
    },

    async insertPayment(conn: Conn, p: PaymentRecord): Promise<void> {
      await conn("agent_payments").insert({
        id: p.id,
        vault_id: p.vaultId,
        user_id: p.userId,
        agent_principal_id: p.agentPrincipalId,
        grant_id: p.grantId,
        idempotency_key: p.idempotencyKey,
        params_hash: p.paramsHash,
        address: p.address,
        chain: p.chain,
        token: p.token,
        amount_cents: p.amountCents,
        currency: p.currency,
        status: p.status,
        created_at: p.createdAt,
        completed_at: p.status === "completed" ? p.createdAt : null,
      });
    },

    async setPaymentStatus(conn: Conn, id: string, status: PaymentStatusName, at: Date): Promise<PaymentRecord> {
      const patch: Record<string, unknown> = { status };
      if (status === "approved") patch.approved_at = at;
      if (status === "completed") patch.completed_at = at;
      if (status === "declined") patch.declined_at = at;
      const [row] = await conn("agent_payments").where({ id }).update(patch).returning("*");
      return toPayment(row);
    },

    /**
     * The grant (locked as in findGrant) and its vault (FOR UPDATE: every payment of the vault is
     * ordered by this lock) with its running totals, then the policy in a second statement whose
     * snapshot starts after both locks: the totals include every payment committed before.
     */
    async lockPaymentContext(trx: Knex.Transaction, grantId: string, dayStart: Date): Promise<(PaymentContext & { grant: AgentGrant }) | undefined> {
      if (!UUID.test(grantId)) return undefined;
      const head = (await lockedGrantAndVault(trx, [utcDay(dayStart), grantId.toLowerCase()]))[0];
      if (!head) return undefined;
      const rows = await policyOf(trx, [String(head.id)]);
      return { ...toPaymentContext({ ...head, ...rows[0] }), grant: toAgentGrant(head) };
    },

    /**
     * The simulate read: the grant and its payment context without locks, read afresh
     * for every call; concurrent calls share one statement (group commit). A non-UUID id
     * names no grant. An abort of `signal` (ctx.signal) before a batch takes the read withdraws it (DeadlineExceeded).
     */
    currentPaymentContext(
      grantId: string,
      dayStart: Date,
      audit?: SimulateRead["audit"],
      signal?: AbortSignal,
    ): Promise<(PaymentContext & { grant: AgentGrant; audited: boolean }) | undefined> {
      return UUID.test(grantId) ? unlockedContexts({ grantId: grantId.toLowerCase(), dayStart, audit, signal }) : Promise.resolve(undefined);
    },

    /**
     * Payments awaiting step-up and draft budgets of a vault, each count stopping at `cap` (partial
     * indexes, no history read); a draft whose agent's grant was revoked is ending and does not count.
     * To decide, call it holding the vault row FOR UPDATE, the lock every payment and saga's final transaction takes.
     */
    async countAwaitingOwner(trx: Conn, vaultId: string, cap: number): Promise<number> {
      const { rows } = await trx.raw(
        `SELECT (SELECT count(*) FROM (SELECT 1 FROM agent_payments WHERE vault_id = ? AND status = 'pending_step_up' LIMIT ?) p)
              + (SELECT count(*) FROM (SELECT 1 FROM budgets WHERE parent_vault_id = ? AND status = 'draft'
                                                        AND NOT ${GRANT_REVOKED_SQL("budgets.grant_id")} LIMIT ?) b) AS n`,
        [vaultId, cap, vaultId, cap],
      );
      return Number((rows as { n: unknown }[])[0]!.n);
    },

    /** A user's payments awaiting approval, oldest first; paged as listDraftBudgets. */
    async listPendingPayments(
      conn: Conn,
      userId: string,
      page?: { limit: number; after?: { at: string; id: string } },
      only: { agentPrincipalId?: string; paymentId?: string } = {},
    ): Promise<(PaymentRecord & { key: { at: string; id: string } })[]> {
      // The status as a literal, matching the pending-payments partial index in any plan.
      const q = conn("agent_payments")
        .where({
          user_id: userId,
          ...(only.agentPrincipalId && { agent_principal_id: only.agentPrincipalId }),
          ...(only.paymentId && { id: only.paymentId }),
        })
        .whereRaw(`status = 'pending_step_up'`)
        .select("*", conn.raw("created_at::text AS created_key"))
        .orderBy([{ column: "created_at" }, { column: "id" }]);
      if (page?.after) q.whereRaw(`(created_at, id) > (?::timestamptz, ?::uuid)`, [page.after.at, page.after.id]);
      if (page) q.limit(page.limit);
      const rows = await q;
      return rows.map((r: Record<string, unknown>) => ({ ...toPayment(r), key: { at: String(r.created_key), id: String(r.id) } }));
    },

    /** Declines the open payments (as declineOpenPayments) the revoked grants made: all of the user's, or one lineage's. */
    async declineRevokedPayments(trx: Knex.Transaction, revoked: RevokedGrants, at: Date): Promise<number> {
      // The statuses as literals, matching the user's open-payments partial index in any plan.
      const q = trx("agent_payments").where({ user_id: revoked.userId }).whereRaw(`status IN ('pending_step_up', 'approved')`);
      // grant_id is stored as text.
      if (revoked.lineageId !== undefined) q.whereRaw(`grant_id IN (SELECT l.id::text FROM (${LINEAGE_GRANT_IDS("?")}) l)`, [revoked.lineageId]);
      return q.update({ status: "declined", declined_at: at });
    },

    /** Declines every payment of these vaults that has not completed (waiting for approval, or approved and not yet repeated); returns how many. */
    async declineOpenPayments(trx: Knex.Transaction, vaultIds: string[], at: Date): Promise<number> {
      // The statuses as literals, matching the open-payments partial index in any plan.
      return trx("agent_payments")
        .whereIn("vault_id", vaultIds)
        .whereRaw(`status IN ('pending_step_up', 'approved')`)
        .update({ status: "declined", declined_at: at });
    },
  };
}

export type PaymentsStore = ReturnType<typeof createPaymentsStore>;

/** The agent principal that made the payment, if it names one (read in the caller's transaction). */
export async function payingAgent(conn: Conn, paymentId: string): Promise<string | undefined> {
  const { rows } = await conn.raw(`SELECT agent_principal_id FROM agent_payments WHERE id = ?`, [paymentId]);
  return (rows as { agent_principal_id: string | null }[])[0]?.agent_principal_id ?? undefined;
}
