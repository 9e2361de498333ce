import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Treasury bindings, batches (the idempotency records) and executions (one per
 * payout). Unique constraints are the backstop for exactly-once: the batch is also
 * serialised by a row lock on its treasury.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE TABLE treasuries (
      partner_id            uuid PRIMARY KEY REFERENCES partners (id),
      payer_entity_id       uuid NOT NULL,
      currency              text NOT NULL,
      status                text NOT NULL CHECK (status IN ('active', 'suspended', 'disabled', 'mandate_expired')),
      balance_cents         bigint NOT NULL CHECK (balance_cents >= 0),
      cap_per_item_cents    bigint,
      cap_per_day_cents     bigint,
      cap_lifetime_cents    bigint,
      step_up_amount_cents  bigint,
      -- Spent totals kept on the locked row, so caps cost no aggregate query.
      spent_lifetime_cents  bigint NOT NULL DEFAULT 0,
      spent_day             text,    -- UTC day YYYY-MM-DD that spent_day_cents counts
      spent_day_cents       bigint NOT NULL DEFAULT 0,
      created_at            timestamptz NOT NULL,
      updated_at            timestamptz NOT NULL
    );

    -- One row per successful batch; a rejected batch stores nothing.
    CREATE TABLE treasury_batches (
      id               uuid PRIMARY KEY,
      partner_id       uuid NOT NULL REFERENCES partners (id),
      idempotency_key  text NOT NULL,
      request_hash     text NOT NULL,
      response         bytea NOT NULL,  -- the first answer, a serialized vaultgate.treasury.v1.Batch
      created_at       timestamptz NOT NULL,
      UNIQUE (partner_id, idempotency_key)
    );
    -- A stored answer is written once and read on replay only: spare the compression.
    ALTER TABLE treasury_batches ALTER COLUMN response SET STORAGE EXTERNAL;

    -- An execution is a payout: its execution_id and payout_id are each used once per partner.
    -- No foreign keys here on purpose: per-row FK checks doubled the INSERT of a 500-item
    -- batch (docs/reference/treasury.md). Each row is written in the transaction that writes its
    -- batch row and checks its recipient under the treasury lock; nothing is ever deleted.
    CREATE TABLE treasury_executions (
      partner_id         uuid NOT NULL,
      execution_id       text NOT NULL,
      payout_id          text NOT NULL,
      batch_id           uuid NOT NULL,
      recipient_user_id  uuid NOT NULL,
      payer_entity_id    uuid NOT NULL,
      amount_cents       bigint NOT NULL CHECK (amount_cents > 0),
      currency           text NOT NULL,
      reference          text NOT NULL,
      executed_at        timestamptz NOT NULL,
      PRIMARY KEY (partner_id, execution_id),
      UNIQUE (partner_id, payout_id)
    );
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(knex, `DROP TABLE treasury_executions, treasury_batches, treasuries`);
}
