import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Partner resources: verification status, wallets, US accounts, the
 * personal ledger, the per-partner event feed that doubles as the webhook outbox,
 * per-partner webhook secrets and fixed-window resource rate-limit counters.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE partners ADD COLUMN webhook_secret_enc text;

    CREATE TABLE user_kyc (
      user_id     uuid PRIMARY KEY REFERENCES users (id),
      status      text NOT NULL CHECK (status IN ('not_started', 'pending', 'approved', 'rejected')),
      provider    text,
      updated_at  timestamptz NOT NULL
    );

    CREATE TABLE user_wallets (
      user_id     uuid NOT NULL REFERENCES users (id),
      chain       text NOT NULL CHECK (chain IN ('eth', 'base', 'arb', 'op', 'polygon', 'sol')),
      address     text NOT NULL,
      created_at  timestamptz NOT NULL,
      PRIMARY KEY (user_id, chain, address)
    );

    CREATE TABLE us_accounts (
      user_id           uuid PRIMARY KEY REFERENCES users (id),
      bank_name         text NOT NULL,
      routing_number    text NOT NULL,
      account_number    text NOT NULL,
      account_type      text NOT NULL,
      beneficiary_name  text NOT NULL,
      created_at        timestamptz NOT NULL
    );

    -- seq orders a user's entries; writers of one user are serialised (advisory lock),
    -- so seq order is commit order and paging never skips a row.
    CREATE TABLE ledger_entries (
      seq           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      id            uuid NOT NULL UNIQUE,
      user_id       uuid NOT NULL REFERENCES users (id),
      direction     text NOT NULL CHECK (direction IN ('credit', 'debit')),
      amount_cents  bigint NOT NULL CHECK (amount_cents >= 0),
      currency      text NOT NULL,
      status        text NOT NULL CHECK (status IN ('pending', 'settled', 'failed')),
      created_at    timestamptz NOT NULL,
      updated_at    timestamptz NOT NULL
    );
    CREATE INDEX ledger_entries_user_seq ON ledger_entries (user_id, seq);

    -- One row per event per partner: the GET /events feed and the webhook outbox.
    CREATE TABLE partner_events (
      seq              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      id               uuid NOT NULL UNIQUE,
      partner_id       uuid NOT NULL REFERENCES partners (id),
      type             text NOT NULL,
      data             jsonb NOT NULL,
      created_at       timestamptz NOT NULL,
      delivery_state   text NOT NULL DEFAULT 'pending' CHECK (delivery_state IN ('pending', 'delivered', 'failed')),
      attempts         integer NOT NULL DEFAULT 0,
      next_attempt_at  timestamptz NOT NULL,
      last_error       text,
      delivered_at     timestamptz
    );
    CREATE INDEX partner_events_partner_seq ON partner_events (partner_id, seq);
    CREATE INDEX partner_events_due ON partner_events (next_attempt_at) WHERE delivery_state = 'pending';

    -- Fixed one-minute windows, one row per key and window: a single upsert per request
    -- keeps resource limits cheap and shared by every replica.
    CREATE TABLE rate_limit_windows (
      key           text NOT NULL,
      window_start  timestamptz NOT NULL,
      count         integer NOT NULL,
      PRIMARY KEY (key, window_start)
    );
  `,
  );
  // One statement, so not through runScript (its body has ';' at line ends).
  await knex.raw(PARTNER_ACCESS_FUNCTION);
}

/**
 * The partner access checks (rate count, partner, user, receipt, consent, success audit) in one
 * round trip; a PL/pgSQL function because it keeps each statement's plan for the session.
 */
const PARTNER_ACCESS_FUNCTION = `
CREATE FUNCTION partner_access(
  p_client_id text, p_user_id uuid, p_own_key text, p_other_keys text[], p_window timestamptz,
  p_limit integer, p_token_has_scope boolean, p_scope text,
  p_audit boolean, p_request_id text, p_actor text, p_action text, p_subject text, p_at timestamptz,
  p_with_kyc boolean
) RETURNS TABLE (
  partner_id uuid, partner_status text, rate_count bigint, user_id uuid, user_status text,
  user_created_at timestamptz, has_receipt boolean, consent_scopes text[], audit_seq bigint,
  kyc_status text, kyc_provider text, kyc_updated_at timestamptz
) LANGUAGE plpgsql AS $fn$
DECLARE
  v_own integer;
  v_others bigint;
BEGIN
  SELECT p.id, p.status INTO partner_id, partner_status FROM partners p WHERE p.client_id = p_client_id;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  INSERT INTO rate_limit_windows AS w (key, window_start, count) VALUES (p_own_key, p_window, 1)
    ON CONFLICT (key, window_start) DO UPDATE SET count = w.count + 1
    RETURNING w.count INTO v_own;
  -- Far below the limit (own shard x shards under a quarter of it) the exact total cannot
  -- matter: with uniformly random shards a total over the limit would need this shard at a
  -- quarter of its expected share. Nearer the limit the other shards are summed exactly.
  IF v_own::bigint * (coalesce(array_length(p_other_keys, 1), 0) + 1) * 4 < p_limit THEN
    rate_count := v_own::bigint * (coalesce(array_length(p_other_keys, 1), 0) + 1);
  ELSE
    SELECT coalesce(sum(w.count), 0) INTO v_others FROM rate_limit_windows w WHERE w.key = ANY(p_other_keys) AND w.window_start = p_window;
    rate_count := v_own + v_others;
  END IF;
  has_receipt := false;
  IF p_user_id IS NOT NULL THEN
    SELECT u.id, u.status, u.created_at INTO user_id, user_status, user_created_at FROM users u WHERE u.id = p_user_id;
    IF user_id IS NOT NULL THEN
      has_receipt := EXISTS (SELECT 1 FROM partner_users pu WHERE pu.partner_id = partner_access.partner_id AND pu.user_id = p_user_id);
      SELECT c.scopes INTO consent_scopes FROM consents c WHERE c.partner_id = partner_access.partner_id AND c.user_id = p_user_id;
      IF p_with_kyc THEN
        SELECT k.status, k.provider, k.updated_at INTO kyc_status, kyc_provider, kyc_updated_at FROM user_kyc k WHERE k.user_id = p_user_id;
      END IF;
    END IF;
  END IF;
  IF p_audit AND partner_status = 'active' AND rate_count <= p_limit AND user_id IS NOT NULL
     AND (has_receipt OR consent_scopes IS NOT NULL) AND user_status = 'active'
     AND p_token_has_scope AND p_scope = ANY(consent_scopes) THEN
    INSERT INTO audit_records (request_id, actor, action, outcome, reason, subject, created_at)
      VALUES (p_request_id, p_actor, p_action, 'success', '', p_subject, p_at)
      RETURNING seq INTO audit_seq;
  END IF;
  RETURN NEXT;
END
$fn$`;

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    DROP FUNCTION partner_access;
    DROP TABLE rate_limit_windows, partner_events, ledger_entries, us_accounts, user_wallets, user_kyc;
    ALTER TABLE partners DROP COLUMN webhook_secret_enc;
  `,
  );
}
