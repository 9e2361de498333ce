import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Partner resources (DESIGN 4.3): verification status, wallets, US accounts, the
 * personal ledger, the per-partner event feed that doubles as the webhook outbox,
 * per-partner webhook secrets and fixed-window resource rate-limit counters.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(knex, `
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
  `);
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `
    DROP TABLE rate_limit_windows, partner_events, ledger_entries, us_accounts, user_wallets, user_kyc;
    ALTER TABLE partners DROP COLUMN webhook_secret_enc;
  `);
}
