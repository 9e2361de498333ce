import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * The books of a settling payment: vault -> in flight on accept, -> hot wallet at depth, back on
 * a reorg, refunded on failure. Movement ids derive from the payment, so replays add nothing.
 */
export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE settlement_payments ADD COLUMN vault_id uuid`);
  await knex.raw(RESERVE_FUNCTION);
  await knex.raw(MOVE_FUNCTION);
  await knex.raw(REFUND_FUNCTION);
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    DROP FUNCTION settlement_refund;
    DROP FUNCTION settlement_move;
    DROP FUNCTION vault_reserve_payment;
    ALTER TABLE settlement_payments DROP COLUMN vault_id;
  `,
  );
}

/** vault_record_spend (migration 0020) with the amount going to the in-flight account. */
const RESERVE_FUNCTION = `
CREATE FUNCTION vault_reserve_payment(p_vault uuid, p_currency text, p_payment uuid, p_amount bigint, p_day date, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO ledger_accounts (id, kind, owner, currency, created_at)
  VALUES (ledger_account_id('external', 'in_flight', p_currency), 'external', 'in_flight', p_currency, p_at) ON CONFLICT DO NOTHING;
  INSERT INTO ledger_transactions (id, kind, reference, created_at) VALUES (p_payment, 'payment', 'payment:' || p_payment, p_at);
  INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at)
  VALUES (p_payment, ledger_account_id('vault', p_vault::text, p_currency), -p_amount, p_currency, p_at),
         (p_payment, ledger_account_id('external', 'in_flight', p_currency), p_amount, p_currency, p_at);
  UPDATE vaults v SET balance_cents = balance_cents - p_amount, spent_lifetime_cents = spent_lifetime_cents + p_amount,
         spent_prev_day_cents = CASE WHEN spent_day = p_day THEN spent_prev_day_cents
                                     WHEN spent_day = p_day - 1 THEN spent_day_cents
                                     WHEN spent_day = p_day + 1 THEN spent_prev_day_cents + p_amount
                                     WHEN spent_day > p_day THEN spent_prev_day_cents ELSE 0 END,
         spent_day_cents = CASE WHEN spent_day = p_day THEN spent_day_cents + p_amount
                                WHEN spent_day > p_day THEN spent_day_cents ELSE p_amount END,
         spent_day = greatest(spent_day, p_day)
   WHERE v.id = p_vault;
END
$fn$`;

/** One movement between two external accounts, once per id (completion, reorg). */
const MOVE_FUNCTION = `
CREATE FUNCTION settlement_move(p_id uuid, p_kind text, p_payment uuid, p_from text, p_to text, p_amount bigint, p_currency text, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO ledger_accounts (id, kind, owner, currency, created_at)
  SELECT ledger_account_id('external', o, p_currency), 'external', o, p_currency, p_at FROM unnest(ARRAY[p_from, p_to]) o
   ORDER BY 1 ON CONFLICT DO NOTHING;
  INSERT INTO ledger_transactions (id, kind, reference, created_at) VALUES (p_id, p_kind, 'payment:' || p_payment, p_at) ON CONFLICT (id) DO NOTHING;
  IF NOT FOUND THEN RETURN; END IF;
  INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at)
  VALUES (p_id, ledger_account_id('external', p_from, p_currency), -p_amount, p_currency, p_at),
         (p_id, ledger_account_id('external', p_to, p_currency), p_amount, p_currency, p_at);
END
$fn$`;

/**
 * A failed payment back to its vault, in one transaction: the balance, and the spend
 * totals of the day it was accepted (p_day), so it stops counting toward any cap.
 */
const REFUND_FUNCTION = `
CREATE FUNCTION settlement_refund(p_id uuid, p_vault uuid, p_currency text, p_payment uuid, p_amount bigint, p_day date, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO ledger_transactions (id, kind, reference, created_at) VALUES (p_id, 'payment.refund', 'payment:' || p_payment, p_at) ON CONFLICT (id) DO NOTHING;
  IF NOT FOUND THEN RETURN; END IF;
  INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at)
  VALUES (p_id, ledger_account_id('external', 'in_flight', p_currency), -p_amount, p_currency, p_at),
         (p_id, ledger_account_id('vault', p_vault::text, p_currency), p_amount, p_currency, p_at);
  UPDATE vaults SET balance_cents = balance_cents + p_amount,
         spent_lifetime_cents = greatest(0, spent_lifetime_cents - p_amount),
         spent_day_cents = CASE WHEN spent_day = p_day THEN greatest(0, spent_day_cents - p_amount) ELSE spent_day_cents END,
         spent_prev_day_cents = CASE WHEN spent_day = p_day + 1 THEN greatest(0, spent_prev_day_cents - p_amount) ELSE spent_prev_day_cents END
   WHERE id = p_vault;
END
$fn$`;
