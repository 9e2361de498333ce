import type { Knex } from "knex";

/**
 * Budgets that are closed or declined bind no new grant, and a vault holds a bounded
 * number of items waiting for its owner.
 * - The code exchange's group-committed fast path leaves every code on a budget's vault
 *   to the locked path, which takes the budget's row lock and refuses a closed or declined
 *   budget: a statement that took no lock could insert a grant a concurrent close never
 *   sees. Codes on other vaults are unchanged (the function is migration 0016's otherwise).
 * - The draft budgets under a vault are counted by index (the pending limit), never by
 *   reading every budget ever made under it.
 */
const EXCHANGE = (guard: string) => `
CREATE OR REPLACE FUNCTION grant_exchange_batch(p_code_hashes text[], p_client_ids text[], p_redirect_uris text[], p_code_challenges text[], p_grant_ids uuid[], p_refresh_hashes text[], p_nows timestamptz[], p_expires timestamptz[], p_request_ids text[], p_actors text[], p_actions text[]) RETURNS SETOF grants LANGUAGE plpgsql
SET enable_seqscan = off SET plan_cache_mode = force_generic_plan AS $fn$
BEGIN
  RETURN QUERY
  WITH x AS (
    SELECT * FROM unnest(p_code_hashes, p_client_ids, p_redirect_uris, p_code_challenges, p_grant_ids, p_refresh_hashes, p_nows, p_expires, p_request_ids, p_actors, p_actions)
      WITH ORDINALITY AS t(code_hash, client_id, redirect_uri, code_challenge, grant_id, refresh_hash, now, expires_at, request_id, actor, action, i)
  ), c AS (
    UPDATE authorization_codes ac SET consumed_at = x.now, grant_id = x.grant_id
      FROM x
     WHERE ac.code_hash = x.code_hash AND ac.consumed_at IS NULL AND ac.client_id = x.client_id
       AND ac.redirect_uri = x.redirect_uri AND ac.code_challenge = x.code_challenge AND ac.expires_at > x.now
       AND EXISTS (SELECT 1 FROM users u WHERE u.id = ac.user_id AND u.status = 'active')${guard}
    RETURNING ac.user_id, ac.client_id, ac.agent_principal_id, ac.vault_id, ac.scopes, ac.step_up, ac.auth_time, ac.audiences,
              x.grant_id, x.refresh_hash, x.now, x.expires_at, x.request_id, x.actor, x.action, x.i
  ), g AS (
    INSERT INTO grants (id, lineage_id, parent_grant_id, user_id, client_id, agent_principal_id, vault_id, scopes, state,
                        step_up, auth_time, issued_at, expires_at, refresh_hash, state_changed_at, audiences)
    SELECT c.grant_id, c.grant_id, NULL, c.user_id, c.client_id, c.agent_principal_id, c.vault_id, c.scopes, 'active',
           c.step_up, c.auth_time, c.now, c.expires_at, c.refresh_hash, c.now, c.audiences FROM c ORDER BY c.i
    RETURNING *
  ), a AS (
    INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
    SELECT c.request_id, c.actor, c.action, 'success', '', c.grant_id::text, c.now FROM c ORDER BY c.i
  )
  SELECT g.* FROM g;
END
$fn$`;

export async function up(knex: Knex): Promise<void> {
  await knex.raw(EXCHANGE(`
       AND NOT EXISTS (SELECT 1 FROM budgets b WHERE b.vault_id = ac.vault_id)`));
  await knex.raw(`CREATE INDEX budgets_parent_draft ON budgets (parent_vault_id) WHERE status = 'draft'`);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP INDEX budgets_parent_draft`);
  await knex.raw(EXCHANGE(""));
}
