import type { Knex } from "knex";

/**
 * The group-committed statements that write audit rows (code exchange, refresh, partner reads)
 * take each call's client address too, so a fast-path row names the caller like every other row.
 */
const BEFORE: Record<string, string> = {
  grant_exchange_batch: `CREATE FUNCTION grant_exchange_batch(p_code_hashes text[], p_client_ids text[], p_redirect_uris text[], p_code_challenges text[], p_grant_ids uuid[], p_refresh_hashes text[], p_nows timestamp with time zone[], p_expires timestamp with time zone[], p_request_ids text[], p_actors text[], p_actions text[])
 RETURNS SETOF grants
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
       AND NOT EXISTS (SELECT 1 FROM budgets b WHERE b.vault_id = ac.vault_id)
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
$function$`,
  grant_refresh_batch: `CREATE FUNCTION grant_refresh_batch(p_refresh_hashes text[], p_client_ids text[], p_issued_after timestamp with time zone[], p_grant_ids uuid[], p_new_refresh_hashes text[], p_refresh_salts text[], p_nows timestamp with time zone[], p_expires timestamp with time zone[], p_request_ids text[], p_actors text[], p_actions text[])
 RETURNS SETOF grants
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
       AND NOT EXISTS (SELECT 1 FROM budgets b WHERE b.vault_id = o.vault_id)
    RETURNING o.id AS parent_id, o.lineage_id, o.user_id, o.client_id, o.agent_principal_id, o.vault_id, o.scopes, o.step_up, o.auth_time, o.audiences,
              x.grant_id, x.new_refresh_hash, x.refresh_salt, x.now, x.expires_at, x.request_id, x.actor, x.action, x.i
  ), g AS (
    INSERT INTO grants (id, lineage_id, parent_grant_id, user_id, client_id, agent_principal_id, vault_id, scopes, state,
                        step_up, auth_time, issued_at, expires_at, refresh_hash, refresh_salt, state_changed_at, audiences)
    SELECT old.grant_id, old.lineage_id, old.parent_id, old.user_id, old.client_id, old.agent_principal_id, old.vault_id, old.scopes, 'active',
           old.step_up, old.auth_time, old.now, old.expires_at, old.new_refresh_hash, old.refresh_salt, old.now, old.audiences FROM old ORDER BY old.i
    RETURNING *
  ), a AS (
    INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
    SELECT old.request_id, old.actor, old.action, 'success', '', old.grant_id::text, old.now FROM old ORDER BY old.i
  )
  SELECT g.* FROM g;
END
$function$`,
  partner_access_batch: `CREATE FUNCTION partner_access_batch(p_client_ids text[], p_user_ids uuid[], p_keys text[], p_windows timestamp with time zone[], p_limits integer[], p_token_has_scope boolean[], p_scopes text[], p_audit boolean[], p_request_ids text[], p_actors text[], p_actions text[], p_subjects text[], p_ats timestamp with time zone[], p_with_kyc boolean[])
 RETURNS TABLE(idx integer, partner_id uuid, partner_status text, rate_count integer, user_found boolean, user_status text, user_created_ms double precision, has_receipt boolean, has_consent boolean, consent_covers boolean, audited boolean, kyc_status text, kyc_provider text, kyc_updated_ms double precision)
 LANGUAGE plpgsql
 SET enable_seqscan TO 'off'
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
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
$function$`,
};

const AUDIT_COLUMNS: [string, string] = [
  `INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)`,
  `INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, client_address, created_at)`,
];

/** The code exchange and refresh statements share their shape up to the audit row's source. */
const grantEdits: [string, string][] = [
  [`p_actions text[])`, `p_actions text[], p_client_addresses text[])`],
  [`p_request_ids, p_actors, p_actions)`, `p_request_ids, p_actors, p_actions, p_client_addresses)`],
  [`request_id, actor, action, i)`, `request_id, actor, action, client_address, i)`],
  [`x.request_id, x.actor, x.action, x.i`, `x.request_id, x.actor, x.action, x.client_address, x.i`],
  AUDIT_COLUMNS,
];

/** The edits that add the address: a parameter, its unnest column, and the audit row's column. */
const EDITS: Record<string, [string, string][]> = {
  grant_exchange_batch: [...grantEdits, [`c.grant_id::text, c.now FROM c`, `c.grant_id::text, c.client_address, c.now FROM c`]],
  grant_refresh_batch: [...grantEdits, [`old.grant_id::text, old.now FROM old`, `old.grant_id::text, old.client_address, old.now FROM old`]],
  partner_access_batch: [
    [`p_with_kyc boolean[])`, `p_with_kyc boolean[], p_client_addresses text[])`],
    [`p_subjects, p_ats, p_with_kyc)`, `p_subjects, p_ats, p_with_kyc, p_client_addresses)`],
    [`subject, at, with_kyc, i)`, `subject, at, with_kyc, client_address, i)`],
    [`k.request_id, k.actor, k.action, k.subject, k.at,`, `k.request_id, k.actor, k.action, k.subject, k.at, k.client_address,`],
    AUDIT_COLUMNS,
    [`d.subject, d.at FROM decided d`, `d.subject, d.client_address, d.at FROM decided d`],
  ],
};

function after(name: string): string {
  let def = BEFORE[name]!;
  for (const [from, to] of EDITS[name]!) {
    if (!def.includes(from)) throw new Error(`0036: ${name} does not contain ${from}`);
    def = def.replace(from, to);
  }
  return def;
}

/** DROP FUNCTION for a definition, by its argument types. */
function drop(def: string): string {
  const [, name, params] = /^CREATE FUNCTION (\w+)\(([^)]*)\)/.exec(def)!;
  return `DROP FUNCTION ${name}(${params!
    .split(", ")
    .map((p) => p.slice(p.indexOf(" ") + 1))
    .join(", ")})`;
}

export async function up(knex: Knex): Promise<void> {
  // One statement each, so not through runScript (the bodies have ';' at line ends).
  for (const name of Object.keys(BEFORE)) {
    await knex.raw(drop(BEFORE[name]!));
    await knex.raw(after(name));
  }
}

export async function down(knex: Knex): Promise<void> {
  for (const name of Object.keys(BEFORE)) {
    await knex.raw(drop(after(name)));
    await knex.raw(BEFORE[name]!);
  }
}
