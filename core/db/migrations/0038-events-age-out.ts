import type { Knex } from "knex";
import { runScript } from "../sql.js";

/** Partner events leave after their retention whatever their delivery state: found by age alone. */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE INDEX partner_events_created ON partner_events (created_at);
    DROP INDEX partner_events_settled;
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE INDEX partner_events_settled ON partner_events (created_at) WHERE delivery_state <> 'pending';
    DROP INDEX partner_events_created;
  `,
  );
}
