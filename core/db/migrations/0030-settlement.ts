import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * On-chain settlement (docs/settlement.md): payments with their lifecycle and worker lease, every
 * signed transaction stored before broadcast (a restart resends the same bytes), and one nonce row
 * per chain and wallet so each payment takes a unique nonce.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE TABLE settlement_payments (
      payment_id        uuid PRIMARY KEY,
      chain             text NOT NULL,
      rail              text NOT NULL CHECK (rail IN ('sandbox', 'evm')),
      wallet            text NOT NULL,
      recipient         text NOT NULL,
      amount_cents      bigint NOT NULL CHECK (amount_cents > 0),
      currency          text NOT NULL,
      status            text NOT NULL CHECK (status IN ('pending', 'submitted', 'completed', 'failed')),
      nonce             bigint,
      tx_hash           text,
      confirmations     integer NOT NULL DEFAULT 0,
      mined_block       bigint,
      mined_block_hash  text,
      failure_reason    text,
      attempts          integer NOT NULL DEFAULT 0,
      final             boolean NOT NULL DEFAULT false,
      lease_token       uuid,
      leased_until      timestamptz,
      next_attempt_at   timestamptz NOT NULL,
      expires_at        timestamptz NOT NULL,
      created_at        timestamptz NOT NULL,
      updated_at        timestamptz NOT NULL,
      submitted_at      timestamptz,
      completed_at      timestamptz
    );
    CREATE UNIQUE INDEX settlement_payments_nonce ON settlement_payments (chain, wallet, nonce) WHERE nonce IS NOT NULL;
    -- The worker's queue: every payment still to settle or to watch, by when it is due.
    CREATE INDEX settlement_payments_due ON settlement_payments (next_attempt_at) WHERE status <> 'failed' AND NOT final;
    -- Money signed for and not yet mined, per wallet (the under-funding check).
    CREATE INDEX settlement_payments_in_flight ON settlement_payments (chain, wallet) WHERE status = 'submitted';

    CREATE TABLE settlement_transactions (
      tx_hash          text PRIMARY KEY,
      payment_id       uuid NOT NULL REFERENCES settlement_payments (payment_id),
      kind             text NOT NULL CHECK (kind IN ('transfer', 'cancel')),
      raw_tx           text NOT NULL,
      max_fee_per_gas  numeric NOT NULL,
      priority_fee     numeric NOT NULL,
      created_at       timestamptz NOT NULL
    );
    CREATE INDEX settlement_transactions_payment ON settlement_transactions (payment_id, created_at);

    CREATE TABLE settlement_nonces (
      chain       text NOT NULL,
      wallet      text NOT NULL,
      next_nonce  bigint NOT NULL,
      PRIMARY KEY (chain, wallet)
    );
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`DROP TABLE settlement_transactions, settlement_nonces, settlement_payments`);
}
