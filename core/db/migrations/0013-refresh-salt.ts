import type { Knex } from "knex";

/**
 * A successor refresh token is HMAC(old token, salt on the row), so a database dump cannot mint
 * one. The old HMAC key is dropped so pre-migration tokens are not recomputable from later dumps.
 */
const GRANT_REFRESH_BATCH = `
CREATE FUNCTION grant_refresh_batch(p_refresh_hashes text[], p_client_ids text[], p_issued_after timestamptz[], p_grant_ids uuid[], p_new_refresh_hashes text[], p_refresh_salts text[], p_nows timestamptz[], p_expires timestamptz[], p_request_ids text[], p_actors text[], p_actions text[]) RETURNS SETOF grants LANGUAGE plpgsql
SET enable_seqscan = off AS $fn$
BEGIN
  RETURN QUERY
  WITH x AS (
    SELECT * FROM unnest(p_refresh_hashes, p_client_ids, p_issued_after, p_grant_ids, p_new_refresh_hashes, p_refresh_salts, p_nows, p_expires, p_request_ids, p_actors, p_actions)
      WITH ORDINALITY AS t(refresh_hash, client_id, issued_after, grant_id, new_refresh_hash, refresh_salt, now, expires_at, request_id, actor, action, i)
  ), old AS (
    UPDATE grants o SET state = 'superseded', refresh_used_at = x.now, successor_id = x.grant_id, state_changed_at = x.now, state_reason = 'refresh'
      FROM x
     WHERE o.refresh_hash = x.refresh_hash AND o.state = 'active' AND o.refresh_used_at IS NULL
       AND coalesce(o.client_id, '') = x.client_id AND o.issued_at > x.issued_after
       AND EXISTS (SELECT 1 FROM users u WHERE u.id = o.user_id AND u.status = 'active')
    RETURNING o.id AS parent_id, o.lineage_id, o.user_id, o.client_id, o.agent_principal_id, o.vault_id, o.scopes, o.step_up, o.auth_time,
              x.grant_id, x.new_refresh_hash, x.refresh_salt, x.now, x.expires_at, x.request_id, x.actor, x.action, x.i
  ), g AS (
    INSERT INTO grants (id, lineage_id, parent_grant_id, user_id, client_id, agent_principal_id, vault_id, scopes, state,
                        step_up, auth_time, issued_at, expires_at, refresh_hash, refresh_salt, state_changed_at)
    SELECT old.grant_id, old.lineage_id, old.parent_id, old.user_id, old.client_id, old.agent_principal_id, old.vault_id, old.scopes, 'active',
           old.step_up, old.auth_time, old.now, old.expires_at, old.new_refresh_hash, old.refresh_salt, old.now FROM old ORDER BY old.i
    RETURNING *
  ), a AS (
    INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
    SELECT old.request_id, old.actor, old.action, 'success', '', old.grant_id::text, old.now FROM old ORDER BY old.i
  )
  SELECT g.* FROM g;
END
$fn$`;

/** Migration 0011's version, for down(). */
const GRANT_REFRESH_BATCH_0011 = `
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
  // One statement each (the function body has ';' at line ends, so not runScript).
  await knex.raw(`ALTER TABLE grants ADD COLUMN refresh_salt text`);
  await knex.raw(`DROP FUNCTION grant_refresh_batch`);
  await knex.raw(GRANT_REFRESH_BATCH);
  await knex.raw(`DELETE FROM instance_secrets WHERE name = 'refresh-token'`);
}

export async function down(knex: Knex): Promise<void> {
  // The deleted key is not restored: refresh tokens are checked by their hash alone, and
  // code rolled back to 0011 mints a fresh key on start.
  await knex.raw(`DROP FUNCTION grant_refresh_batch`);
  await knex.raw(GRANT_REFRESH_BATCH_0011);
  await knex.raw(`ALTER TABLE grants DROP COLUMN refresh_salt`);
}
