import type { Knex } from "knex";
import { toGrant } from "./grants.js";

type Conn = Knex | Knex.Transaction;

/** A budget's own agent principal: the budgets saga creates and removes it through these, each idempotent. */
export const budgetPrincipals = {
  async insert(conn: Conn, a: { id: string; userId: string; parentAgentId: string | null; vaultId: string; displayName: string; at: Date }) {
    await conn.raw(
      `INSERT INTO agent_principals (id, user_id, parent_agent_id, vault_id, display_name, created_at) VALUES (?, ?, ?, ?, ?, ?)
       ON CONFLICT (id) DO NOTHING`,
      [a.id, a.userId, a.parentAgentId, a.vaultId, a.displayName, a.at],
    );
  },

  async delete(conn: Conn, id: string) {
    await conn("agent_principals").where({ id }).delete();
  },

  /** SQL counting the principal the one binding names (0 or 1), for a statement that checks several resources at once. */
  COUNT_SQL: "(SELECT count(*) FROM agent_principals WHERE id = ?)",
};

/** SQL for the agent principals grants act as, and the owner's view of them. */
export function createAgentsStore() {
  /** The agent principal of a user and client, created on first use. */
  async function ensureAgent(trx: Knex.Transaction, a: { id: string; userId: string; clientKey: string; displayName: string; at: Date }): Promise<string> {
    const existing = await trx("oauth_agents").where({ user_id: a.userId, client_id: a.clientKey }).first();
    if (existing) return String(existing.agent_principal_id);
    await trx("agent_principals").insert({ id: a.id, user_id: a.userId, display_name: a.displayName, created_at: a.at });
    const { rows } = await trx.raw(
      `INSERT INTO oauth_agents (user_id, client_id, agent_principal_id) VALUES (?, ?, ?)
       ON CONFLICT (user_id, client_id) DO NOTHING RETURNING agent_principal_id`,
      [a.userId, a.clientKey, a.id],
    );
    if ((rows as unknown[]).length > 0) return a.id;
    // A concurrent first consent won; drop ours and use theirs.
    await trx("agent_principals").where({ id: a.id }).delete();
    const row = await trx("oauth_agents").where({ user_id: a.userId, client_id: a.clientKey }).first();
    return String(row.agent_principal_id);
  }

  /**
   * The budget principal whose own vault is `vaultId` (undefined for any other vault), locked FOR KEY
   * SHARE to the end of the caller's transaction so a budget cleanup cannot delete it between this
   * read and the insert that refers to it.
   */
  async function budgetPrincipalOfVault(trx: Knex.Transaction, userId: string, vaultId: string): Promise<string | undefined> {
    const row = await trx("agent_principals")
      .where({ vault_id: vaultId, user_id: userId })
      .whereNotNull("parent_agent_id")
      .orderBy([{ column: "created_at" }, { column: "id" }])
      .forKeyShare()
      .first("id");
    return row ? String(row.id) : undefined;
  }

  return {
    /**
     * The one place that decides which agent principal a new grant or code acts as (budget's vault:
     * the budget's; else the user's and client's). Call it in the transaction that inserts it.
     */
    async principalForGrant(
      trx: Knex.Transaction,
      a: { id: string; userId: string; vaultId: string; clientKey: string; displayName: string; at: Date },
    ): Promise<string> {
      return (await budgetPrincipalOfVault(trx, a.userId, a.vaultId)) ?? (await ensureAgent(trx, a));
    },

    /**
     * A page of the user's agents, newest first (`ids`: only those); a grant on a budget's vault acts
     * as the budget, so budget principals that have grants are listed too, named by their budget.
     */
    async agentsPage(conn: Conn, userId: string, page: { limit: number; after?: AgentKey; ids?: string[] }) {
      // The client's name by a lookup per agent: a join may plan as a walk of every client.
      const q = conn("agent_principals as p")
        .leftJoin("oauth_agents as a", (j) => j.on("a.agent_principal_id", "p.id").andOn("a.user_id", "p.user_id"))
        .leftJoin("oauth_agents as pa", "pa.agent_principal_id", "p.parent_agent_id")
        .where({ "p.user_id": userId })
        .where((w) =>
          w
            .whereNotNull("a.agent_principal_id")
            .orWhere((b) =>
              b
                .whereNotNull("p.parent_agent_id")
                .whereExists((g) => g.select(conn.raw("1")).from("grants as g").whereRaw("g.agent_principal_id = p.id").where({ "g.user_id": userId })),
            ),
        )
        .select(
          "p.id",
          "p.display_name",
          "a.client_id as own_client",
          "pa.client_id as parent_client",
          conn.raw("(SELECT c.client_name FROM oauth_clients c WHERE c.client_id = COALESCE(a.client_id, pa.client_id)) AS client_name"),
          conn.raw("p.created_at::text AS created_key"),
        )
        .orderByRaw("p.created_at DESC, p.id DESC")
        .limit(page.limit);
      if (page.after) q.whereRaw("(p.created_at, p.id) < (?::timestamptz, ?::uuid)", [page.after.at, page.after.id]);
      if (page.ids) q.whereIn("p.id", page.ids);
      const rows: Record<string, unknown>[] = await q;
      return rows.map((r) => {
        const client = r.client_name == null ? undefined : String(r.client_name);
        const budget = r.own_client == null;
        return {
          agentId: String(r.id),
          clientId: String(r.own_client ?? r.parent_client ?? ""),
          displayName: budget ? (client ? `${String(r.display_name)} (via ${client})` : String(r.display_name)) : (client ?? String(r.display_name)),
          key: { at: String(r.created_key), id: String(r.id) } satisfies AgentKey,
        };
      });
    },

    /** How many active grants each agent holds, with its `newest` most recent ones (newest first). */
    async activeGrantsOf(conn: Conn, userId: string, agentIds: string[], newest: number) {
      const out = new Map<string, { count: number; newest: ReturnType<typeof toGrant>[] }>(agentIds.map((id) => [id, { count: 0, newest: [] }]));
      if (agentIds.length === 0) return out;
      const rows: Record<string, unknown>[] = await conn
        .select("*")
        .from(
          conn("grants")
            .where({ user_id: userId, state: "active" })
            .whereIn("agent_principal_id", agentIds)
            .select(
              "*",
              conn.raw("row_number() OVER (PARTITION BY agent_principal_id ORDER BY issued_at DESC, id DESC) AS nth"),
              conn.raw("count(*) OVER (PARTITION BY agent_principal_id) AS active_count"),
            )
            .as("g"),
        )
        .where("nth", "<=", Math.max(newest, 1))
        .orderBy([
          { column: "issued_at", order: "desc" },
          { column: "id", order: "desc" },
        ]);
      for (const r of rows) {
        const entry = out.get(String(r.agent_principal_id))!;
        entry.count = Number(r.active_count);
        if (Number(r.nth) <= newest) entry.newest.push(toGrant(r));
      }
      return out;
    },

    /** The vaults an agent's active grants act on, each once. */
    async activeVaultsOf(conn: Conn, userId: string, agentId: string): Promise<string[]> {
      const rows = await conn("grants").where({ user_id: userId, agent_principal_id: agentId, state: "active" }).distinct("vault_id");
      return rows.map((r: Record<string, unknown>) => String(r.vault_id));
    },

    /**
     * One page of an agent's grants: the active ones first, then the newest first. `after` is the
     * last row's key of the page before; each row carries its own key.
     */
    async grantsOfAgent(conn: Conn, userId: string, agentId: string, page: { limit: number; after?: GrantKey }) {
      const q = conn("grants")
        .where({ agent_principal_id: agentId, user_id: userId })
        .select("*", conn.raw("(state = 'active')::int AS active_key"), conn.raw("issued_at::text AS issued_key"))
        .orderByRaw("(state = 'active') DESC, issued_at DESC, id DESC")
        .limit(page.limit);
      if (page.after)
        q.whereRaw(`((state = 'active')::int, issued_at, id) < (?::int, ?::timestamptz, ?::uuid)`, [page.after.active, page.after.at, page.after.id]);
      const rows = await q;
      return rows.map((r: Record<string, unknown>) => ({
        ...toGrant(r),
        key: { active: Number(r.active_key), at: String(r.issued_key), id: String(r.id) } satisfies GrantKey,
      }));
    },
  };
}

/** Where an agent sorts in the user's list (agentsPage): created when, its id. */
export interface AgentKey {
  at: string;
  id: string;
}

/** Where a grant sorts in an agent's list (grantsOfAgent): active or not, issued when, its id. */
export interface GrantKey {
  active: number;
  at: string;
  id: string;
}

export type AgentsStore = ReturnType<typeof createAgentsStore>;
