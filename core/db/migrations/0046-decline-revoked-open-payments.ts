import type { Knex } from "knex";

/**
 * Payments older releases left open when a client revoked its token, a refresh token was reused or
 * (before that) any grant was revoked: declined, as a revocation now does. Status only; none held money.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    UPDATE agent_payments p SET status = 'declined', declined_at = now()
     WHERE p.status IN ('pending_step_up', 'approved')
       AND EXISTS (SELECT 1 FROM grants g
                    WHERE g.id = (CASE WHEN p.grant_id ~ '^[0-9a-f-]{36}$' THEN p.grant_id::uuid END) AND g.state = 'revoked')`);
}

export async function down(): Promise<void> {
  // A declined payment stays declined: older releases read the status as it is.
}
