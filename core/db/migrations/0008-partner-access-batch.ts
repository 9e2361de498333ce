import type { Knex } from "knex";

/**
 * Partner resource throughput: group commit for the access checks. Concurrent
 * requests' checks are sent together (core/partners/resources-store.ts readAccess) and
 * run as one statement in one transaction: one rate-limit upsert per key instead of one
 * per request, every success audit row in one multi-row INSERT, and one commit (one WAL
 * flush) for the lot. The rules are those of partner_access() (0003), item by item:
 *  - one counter row per key and window again (0003 spread a key over 32 shard rows so
 *    that single requests would not queue on one row lock; a batch takes the lock once
 *    for all its requests). Concurrent batches of one key queue on that row, and the
 *    upsert returns the count including every committed batch, so an item's count is
 *    exact: the count before its batch plus its rank among the batch's items of the key.
 *    (Summing shards could not see other transactions' uncommitted increments, so
 *    concurrent requests could pass the limit.)
 *  - the success audit row of an item is inserted exactly when it asked for one and
 *    every check passes, so `audited` is true exactly when its data may leave.
 * The result is scalars that are cheap to decode on the hot path: booleans for the
 * consent checks instead of the scope array, times as epoch milliseconds.
 * Counter rows are upserted in key order, so concurrent batches that share keys always
 * lock them in the same order and cannot deadlock. PL/pgSQL caches the plan; every row
 * is found by a primary or unique key, so sequential scans are switched off for it (a plan
 * cached while a table was small must not scan it once it has grown; see 0011).
 * partner_access() itself is no longer called; it stays for rollback to older code.
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
