import type { Knex } from "knex";
import type { Db } from "../db/knex.js";
import type { Policy } from "./policy.js";
import { date, spentTodaySql, toPolicy } from "./records.js";

type Conn = Knex | Knex.Transaction;

/** How many recent payments each vault shows. */
export const RECENT_PAYMENTS = 10;

/**
 * Budget rows still being provisioned, or whose provisioning failed: their vaults are
 * saga artefacts, not budgets the owner has (a draft is the first state an owner sees).
 */
const SAGA_STATUSES = ["provisioning", "failed", "cleanup_pending"] as const;

/** One vault of the owner with its budget, agent principal and policy (columns may be null). */
export interface MoneyVaultRow {
  vaultId: string;
  parentVaultId: string | null;
  currency: string;
  balanceCents: number;
  spentTodayCents: number;
  spentLifetimeCents: number;
  createdAt: Date;
  /** The budget's status as stored (null for a vault without a budget row, e.g. a root vault). */
  budgetStatus: string | null;
  agentPrincipalId: string | null;
  displayName: string;
  policy: (Policy & { purpose: string }) | null;
}

export interface MoneyPaymentRow {
  id: string;
  vaultId: string;
  agentPrincipalId: string | null;
  status: string;
  amountCents: number;
  currency: string;
  address: string;
  chain: string;
  token: string;
  createdAt: Date;
  /** An accepted payment's settlement (pending, submitted, completed, failed) and transfer hash. */
  settlement: string | null;
  txHash: string | null;
}

/** SQL for the owner's money at a glance (GetMoneyView): two statements whatever the number of vaults. */
export function createMoneyViewStore(db: Db) {
  const store = {
    /**
     * Reads both parts in one REPEATABLE READ, read-only transaction, so balances, totals
     * and the recent payments are one consistent snapshot (a payment completing between
     * the two statements cannot appear in one and not the other).
     */
    async read(userId: string, today: Date): Promise<{ vaults: MoneyVaultRow[]; payments: MoneyPaymentRow[] }> {
      return db.transaction(async (trx) => {
        await trx.raw("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
        const vaults = await store.vaults(trx, userId, today);
        const payments = vaults.length ? await store.recentPayments(trx, userId) : [];
        return { vaults, payments };
      });
    },

    /**
     * Every vault the user owns (vaults_owner index) with its budget, the budget's agent
     * principal and the vault's policy, in one statement. A vault has at most one budget
     * row (its id is allocated by that row); the lateral pick keeps it so should that change.
     */
    async vaults(conn: Conn, userId: string, today: Date): Promise<MoneyVaultRow[]> {
      const { rows } = await conn.raw(
        `SELECT v.id, v.parent_vault_id, v.currency, v.balance_cents, v.spent_lifetime_cents, v.created_at,
                ${spentTodaySql("d.day")} AS spent_today,
                b.status AS b_status, b.agent_principal_id, b.params ->> 'displayName' AS b_display_name,
                ap.display_name AS ap_display_name,
                p.vault_id AS p_vault_id, p.status AS p_status, p.purpose, p.amount_cap_cents_per_tx, p.amount_cap_cents_per_day,
                p.amount_cap_cents_lifetime, p.step_up_amount_cents, p.chain_allowlist, p.time_window_end
           FROM (SELECT ?::date AS day) d
           JOIN vaults v ON v.owner_user_id = ?
           LEFT JOIN LATERAL (SELECT b.status, b.agent_principal_id, b.params FROM budgets b
                               WHERE b.user_id = v.owner_user_id AND b.vault_id = v.id
                               ORDER BY b.updated_at DESC LIMIT 1) b ON true
           LEFT JOIN agent_principals ap ON ap.id = b.agent_principal_id
           LEFT JOIN vault_policies p ON p.vault_id = v.id
          WHERE b.status IS NULL OR b.status NOT IN (${SAGA_STATUSES.map(() => "?").join(", ")})
          ORDER BY v.created_at, v.id`,
        [today.toISOString().slice(0, 10), userId, ...SAGA_STATUSES],
      );
      return (rows as Record<string, unknown>[]).map((r) => ({
        vaultId: String(r.id),
        parentVaultId: r.parent_vault_id ? String(r.parent_vault_id) : null,
        currency: String(r.currency),
        balanceCents: Number(r.balance_cents),
        spentTodayCents: Number(r.spent_today),
        spentLifetimeCents: Number(r.spent_lifetime_cents),
        createdAt: date(r.created_at),
        budgetStatus: r.b_status === null || r.b_status === undefined ? null : String(r.b_status),
        agentPrincipalId: r.agent_principal_id ? String(r.agent_principal_id) : null,
        displayName: String(r.ap_display_name ?? r.b_display_name ?? ""),
        policy: r.p_vault_id ? { ...toPolicy({ ...r, status: r.p_status }), purpose: String(r.purpose) } : null,
      }));
    },

    /**
     * The newest payments of each of the user's vaults, at most RECENT_PAYMENTS per vault,
     * in one statement: a lateral LIMIT per vault reads only those rows' worth of each
     * vault's payments, never a whole history into the result.
     */
    async recentPayments(conn: Conn, userId: string): Promise<MoneyPaymentRow[]> {
      const { rows } = await conn.raw(
        `SELECT p.id, p.vault_id, p.agent_principal_id, p.status, p.amount_cents, p.currency, p.address, p.chain, p.token, p.created_at,
                s.status AS s_status, s.tx_hash
           FROM vaults v
           CROSS JOIN LATERAL (SELECT * FROM agent_payments p WHERE p.vault_id = v.id
                                ORDER BY p.created_at DESC, p.id DESC LIMIT ${RECENT_PAYMENTS}) p
           LEFT JOIN settlement_payments s ON s.payment_id = p.id
          WHERE v.owner_user_id = ?
          ORDER BY p.vault_id, p.created_at DESC, p.id DESC`,
        [userId],
      );
      return (rows as Record<string, unknown>[]).map((r) => ({
        id: String(r.id),
        vaultId: String(r.vault_id),
        agentPrincipalId: r.agent_principal_id ? String(r.agent_principal_id) : null,
        status: String(r.status),
        amountCents: Number(r.amount_cents),
        currency: String(r.currency),
        address: String(r.address),
        chain: String(r.chain),
        token: String(r.token),
        createdAt: date(r.created_at),
        settlement: r.s_status ? String(r.s_status) : null,
        txHash: r.tx_hash ? String(r.tx_hash) : null,
      }));
    },
  };
  return store;
}

export type MoneyViewStore = ReturnType<typeof createMoneyViewStore>;
