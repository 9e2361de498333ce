import type { Knex } from "knex";

/**
 * The group-committed code exchange and refresh as PL/pgSQL functions, planned once per session.
 * Sequential scans are off: every row is found by a unique index at any table size.
 */
const GRANT_EXCHANGE_BATCH = `
CREATE FUNCTION grant_exchange_batch(p_code_hashes text[], p_client_ids text[], p_redirect_uris text[], p_code_challenges text[], p_grant_ids uuid[], p_refresh_hashes text[], p_nows timestamptz[], p_expires timestamptz[], p_request_ids text[], p_actors text[], p_actions text[]) RETURNS SETOF grants LANGUAGE plpgsql
SET enable_seqscan = off AS $fn$
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
       AND EXISTS (SELECT 1 FROM users u WHERE u.id = ac.user_id AND u.status = 'active')
    RETURNING ac.user_id, ac.client_id, ac.agent_principal_id, ac.vault_id, ac.scopes, ac.step_up, ac.auth_time,
              x.grant_id, x.refresh_hash, x.now, x.expires_at, x.request_id, x.actor, x.action, x.i
  ), g AS (
    INSERT INTO grants (id, lineage_id, parent_grant_id, user_id, client_id, agent_principal_id, vault_id, scopes, state,
                        step_up, auth_time, issued_at, expires_at, refresh_hash, state_changed_at)
    SELECT c.grant_id, c.grant_id, NULL, c.user_id, c.client_id, c.agent_principal_id, c.vault_id, c.scopes, 'active',
           c.step_up, c.auth_time, c.now, c.expires_at, c.refresh_hash, c.now FROM c ORDER BY c.i
    RETURNING *
  ), a AS (
    INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
    SELECT c.request_id, c.actor, c.action, 'success', '', c.grant_id::text, c.now FROM c ORDER BY c.i
  )
  SELECT g.* FROM g;
END
$fn$`;

const GRANT_REFRESH_BATCH = `
CREATE FUNCTION grant_refresh_batch(p_refresh_hashes text[], p_client_ids text[], p_issued_after timestamptz[], p_grant_ids uuid[], p_new_refresh_hashes text[], p_nows timestamptz[], p_expires timestamptz[], p_request_ids text[], p_actors text[], p_actions text[]) RETURNS SETOF grants LANGUAGE plpgsql
SET enable_seqscan = off AS $fn$
BEGIN
  RETURN QUERY
  WITH x AS (
    SELECT * FROM unnest(p_refresh_hashes, p_client_ids, p_issued_after, p_grant_ids, p_new_refresh_hashes, p_nows, p_expires, p_request_ids, p_actors, p_actions)
      WITH ORDINALITY AS t(refresh_hash, client_id, issued_after, grant_id, new_refresh_hash, now, expires_at, request_id, actor, action, i)
  ), old AS (
    UPDATE grants o SET state = 'superseded', refresh_used_at = x.now, successor_id = x.grant_id, state_changed_at = x.now, state_reason = 'refresh'
      FROM x
     WHERE o.refresh_hash = x.refresh_hash AND o.state = 'active' AND o.refresh_used_at IS NULL
       AND coalesce(o.client_id, '') = x.client_id AND o.issued_at > x.issued_after
       AND EXISTS (SELECT 1 FROM users u WHERE u.id = o.user_id AND u.status = 'active')
    RETURNING o.id AS parent_id, o.lineage_id, o.user_id, o.client_id, o.agent_principal_id, o.vault_id, o.scopes, o.step_up, o.auth_time,
              x.grant_id, x.new_refresh_hash, x.now, x.expires_at, x.request_id, x.actor, x.action, x.i
  ), g AS (
    INSERT INTO grants (id, lineage_id, parent_grant_id, user_id, client_id, agent_principal_id, vault_id, scopes, state,
                        step_up, auth_time, issued_at, expires_at, refresh_hash, state_changed_at)
    SELECT old.grant_id, old.lineage_id, old.parent_id, old.user_id, old.client_id, old.agent_principal_id, old.vault_id, old.scopes, 'active',
           old.step_up, old.auth_time, old.now, old.expires_at, old.new_refresh_hash, old.now FROM old ORDER BY old.i
    RETURNING *
  ), a AS (
    INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
    SELECT old.request_id, old.actor, old.action, 'success', '', old.grant_id::text, old.now FROM old ORDER BY old.i
  )
  SELECT g.* FROM g;
END
$fn$`;

export async function up(knex: Knex): Promise<void> {
  // One statement each, so not through runScript (their bodies have ';' at line ends).
  await knex.raw(GRANT_EXCHANGE_BATCH);
  await knex.raw(GRANT_REFRESH_BATCH);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP FUNCTION grant_refresh_batch`);
  await knex.raw(`DROP FUNCTION grant_exchange_batch`);
}
