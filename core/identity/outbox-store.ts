import type { Knex } from "knex";

type Conn = Knex | Knex.Transaction;

/** SQL for the dev outbox: the messages a development core would have e-mailed. */
export function createOutboxStore() {
  return {
    async insertOutbox(conn: Conn, m: { id: string; email: string; subject: string; body: string; at: Date }): Promise<void> {
      await conn("dev_outbox").insert({ id: m.id, email: m.email, subject: m.subject, body: m.body, created_at: m.at });
    },

    async listOutbox(conn: Conn, email: string | undefined, limit = 100) {
      const q = conn("dev_outbox").orderBy("seq", "desc").limit(limit);
      if (email) q.where({ email });
      const rows = await q;
      return rows.map((r: Record<string, unknown>) => ({
        email: String(r.email),
        subject: String(r.subject),
        body: String(r.body),
        createdAt: new Date(r.created_at as string),
      }));
    },
  };
}

export type OutboxStore = ReturnType<typeof createOutboxStore>;
