import type { Knex } from "knex";

/**
 * Group commit for the partner access checks, with partner_access()'s rules per item; one counter
 * row per key (upserted in key order, so batches cannot deadlock) keeps every count exact.
 * Sequential scans are off so a plan cached on a small table never scans it once grown.
 */
const PARTNER_ACCESS_BATCH_FUNCTION = `
CREATE FUNCTION partner_access_batch(
  p_client_ids text[], p_user_ids uuid[], p_keys text[], p_windows timestamptz[],
  p_limits integer[], p_token_has_scope boolean[], p_scopes text[], p_audit boolean[],
  p_request_ids text[], p_actors text[], p_actions text[], p_subjects text[], p_ats timestamptz[],
  p_with_kyc boolean[]
) RETURNS TABLE (
  idx integer, partner_id uuid, partner_status text, rate_count integer, user_found boolean, user_status text,
  user_created_ms float8, has_receipt boolean, has_consent boolean, consent_covers boolean, audited boolean,
  kyc_status text, kyc_provider text, kyc_updated_ms float8
) LANGUAGE plpgsql
SET enable_seqscan = off AS $fn$
#variable_conflict use_column
BEGIN
  RETURN QUERY
  WITH items AS (
    SELECT t.* FROM unnest(p_client_ids, p_user_ids, p_keys, p_windows, p_limits,
        p_token_has_scope, p_scopes, p_audit, p_request_ids, p_actors, p_actions, p_subjects, p_ats, p_with_kyc)
      WITH ORDINALITY AS t(client_id, uid, rate_key, win, lim, token_has_scope, scope, want_audit,
        request_id, actor, action, subject, at, with_kyc, i)
  ),
  known AS (
    SELECT it.*, p.id AS pid, p.status AS pstatus FROM items it JOIN partners p ON p.client_id = it.client_id
  ),
  keys AS (
    SELECT k.rate_key, k.win, count(*)::integer AS n FROM known k GROUP BY k.rate_key, k.win
  ),
  bumped AS (
    INSERT INTO rate_limit_windows AS w (key, window_start, count)
      SELECT keys.rate_key, keys.win, keys.n FROM keys ORDER BY keys.rate_key, keys.win
    ON CONFLICT (key, window_start) DO UPDATE SET count = w.count + excluded.count
    RETURNING w.key, w.window_start, w.count
  ),
  totals AS (
    SELECT keys.rate_key, keys.win, (b.count - keys.n)::bigint AS before
    FROM keys JOIN bumped b ON b.key = keys.rate_key AND b.window_start = keys.win
  ),
  looked AS (
    SELECT k.i, k.pid, k.pstatus,
      t.before + row_number() OVER (PARTITION BY k.rate_key, k.win ORDER BY k.i) AS rc,
      k.lim, k.token_has_scope, k.scope, k.want_audit, k.request_id, k.actor, k.action, k.subject, k.at,
      u.id AS user_found, u.status AS ustatus, u.created_at AS ucreated,
      (u.id IS NOT NULL AND EXISTS (SELECT 1 FROM partner_users pu WHERE pu.partner_id = k.pid AND pu.user_id = k.uid)) AS receipt,
      c.scopes AS cscopes, ky.status AS kstatus, ky.provider AS kprovider, ky.updated_at AS kupdated
    FROM known k
    JOIN totals t ON t.rate_key = k.rate_key AND t.win = k.win
    LEFT JOIN users u ON u.id = k.uid
    LEFT JOIN consents c ON u.id IS NOT NULL AND c.partner_id = k.pid AND c.user_id = k.uid
    LEFT JOIN user_kyc ky ON u.id IS NOT NULL AND k.with_kyc AND ky.user_id = k.uid
  ),
  decided AS (
    SELECT l.*, coalesce(l.want_audit AND l.pstatus = 'active' AND l.rc <= l.lim AND l.user_found IS NOT NULL
      AND (l.receipt OR l.cscopes IS NOT NULL) AND l.ustatus = 'active'
      AND l.token_has_scope AND l.scope = ANY (l.cscopes), false) AS do_audit
    FROM looked l
  ),
  written AS (
    INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
      SELECT d.request_id, d.actor, d.action, 'success', '', d.subject, d.at FROM decided d WHERE d.do_audit ORDER BY d.i
    RETURNING 1 AS one
  )
  SELECT d.i::integer, d.pid, d.pstatus, d.rc::integer, d.user_found IS NOT NULL, d.ustatus,
    extract(epoch FROM d.ucreated)::float8 * 1000, d.receipt, d.cscopes IS NOT NULL, coalesce(d.scope = ANY (d.cscopes), false),
    d.do_audit AND EXISTS (SELECT 1 FROM written), d.kstatus, d.kprovider, extract(epoch FROM d.kupdated)::float8 * 1000
  FROM decided d ORDER BY d.i;
END
$fn$`;

export async function up(knex: Knex): Promise<void> {
  // One statement, so not through runScript (its body has ';' at line ends).
  await knex.raw(PARTNER_ACCESS_BATCH_FUNCTION);
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP FUNCTION partner_access_batch`);
}
