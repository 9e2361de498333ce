import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * The double-entry ledger under every movement of money (docs/ledger.md).
 * Account ids are a pure function of owner, kind and currency so a movement never reads first;
 * a transaction id is its idempotency key. Existing balances come in as opening transactions.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE FUNCTION ledger_account_id(p_kind text, p_owner text, p_currency text) RETURNS uuid
      LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT md5(p_kind || ':' || p_owner || ':' || p_currency)::uuid $$;

    CREATE TABLE ledger_accounts (
      id          uuid PRIMARY KEY,
      kind        text NOT NULL CHECK (kind IN ('vault', 'treasury', 'user', 'external')),
      owner       text NOT NULL,
      currency    text NOT NULL CHECK (currency ~ '^[A-Z]{3}$'),
      created_at  timestamptz NOT NULL,
      UNIQUE (kind, owner, currency),
      CHECK (id = ledger_account_id(kind, owner, currency))
    );

    CREATE TABLE ledger_transactions (
      id          uuid PRIMARY KEY,
      kind        text NOT NULL,
      reference   text NOT NULL,
      created_at  timestamptz NOT NULL
    );

    -- No foreign keys on purpose (a 500-item payout writes up to 501 legs): verify checks that
    -- every leg names a known transaction and account.
    CREATE TABLE ledger_postings (
      seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      transaction_id  uuid NOT NULL,
      account_id      uuid NOT NULL,
      amount_cents    bigint NOT NULL CHECK (amount_cents <> 0),
      currency        text NOT NULL,
      created_at      timestamptz NOT NULL
    );
    -- A movement's legs by its id (idempotent replays, verify). A payout's legs share one
    -- id, which a B-tree stores once (deduplication): cheap on the batch's hot path.
    CREATE INDEX ledger_postings_transaction ON ledger_postings (transaction_id);

    CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION '% is append-only', TG_TABLE_NAME; END $$;
    CREATE TRIGGER ledger_transactions_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_transactions
      FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
    CREATE TRIGGER ledger_postings_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_postings
      FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
    CREATE TRIGGER ledger_accounts_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON ledger_accounts
      FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
  `,
  );
  await knex.raw(OPEN_ACCOUNTS_FUNCTION);
  await knex.raw(RECORD_SPEND_FUNCTION);
  await runScript(
    knex,
    `
    CREATE TRIGGER vaults_ledger_account AFTER INSERT ON vaults
      FOR EACH ROW EXECUTE FUNCTION ledger_open_accounts('vault', 'id');
    CREATE TRIGGER treasuries_ledger_account AFTER INSERT OR UPDATE OF currency ON treasuries
      FOR EACH ROW EXECUTE FUNCTION ledger_open_accounts('treasury', 'partner_id');

    -- Opening balances: every account that holds money today gets one opening transaction
    -- against external:opening, so verify holds from the first start on this version.
    INSERT INTO ledger_accounts (id, kind, owner, currency, created_at)
    SELECT ledger_account_id(k.kind, k.owner, k.currency), k.kind, k.owner, k.currency, now()
      FROM (SELECT 'vault' AS kind, id::text AS owner, currency FROM vaults
            UNION SELECT 'treasury', partner_id::text, currency FROM treasuries
            UNION SELECT 'user', user_id::text, currency FROM ledger_entries WHERE status = 'settled'
            UNION SELECT 'external', e.name, c.currency FROM (VALUES ('funding'), ('payments'), ('transfers'), ('opening')) e (name),
                   (SELECT currency FROM vaults UNION SELECT currency FROM treasuries
                    UNION SELECT currency FROM ledger_entries WHERE status = 'settled') c) k
    ON CONFLICT DO NOTHING;
  `,
  );
  await knex.raw(`INSERT INTO ledger_transactions (id, kind, reference, created_at)
                   SELECT transaction_id, 'opening_balance', reference, now() FROM (${OPENING}) o`);
  await knex.raw(`INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at)
                   SELECT transaction_id, account_id, balance, currency, now() FROM (${OPENING}) o
                   UNION ALL
                   SELECT transaction_id, ledger_account_id('external', 'opening', currency), -balance, currency, now() FROM (${OPENING}) o`);
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    DROP TRIGGER treasuries_ledger_account ON treasuries;
    DROP TRIGGER vaults_ledger_account ON vaults;
    DROP FUNCTION ledger_open_accounts;
    DROP FUNCTION vault_record_spend;
    DROP TABLE ledger_postings, ledger_transactions, ledger_accounts;
    DROP FUNCTION ledger_append_only;
    DROP FUNCTION ledger_account_id;
  `,
  );
}

/** Opens the accounts a vault or treasury moves money through, with its row. One statement (not through runScript). */
const OPEN_ACCOUNTS_FUNCTION = `
CREATE FUNCTION ledger_open_accounts() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
  v_kind text := TG_ARGV[0];
  v_owner text := to_jsonb(NEW) ->> TG_ARGV[1];
BEGIN
  INSERT INTO ledger_accounts (id, kind, owner, currency, created_at)
  SELECT ledger_account_id(a.kind, a.owner, NEW.currency), a.kind, a.owner, NEW.currency, now()
    FROM (VALUES (v_kind, v_owner), ('external', 'funding'), ('external', 'payments')) a (kind, owner)
  ON CONFLICT DO NOTHING;
  RETURN NULL;
END
$fn$`;

/** Every balance held before this version: one opening transaction per account, against external:opening. */
const OPENING = `
  SELECT ledger_account_id('opening', a.kind || ':' || a.owner, a.currency) AS transaction_id,
         a.kind || ':' || a.owner AS reference, a.account_id, a.currency, a.balance
    FROM (SELECT 'vault' AS kind, id::text AS owner, currency,
                 ledger_account_id('vault', id::text, currency) AS account_id, balance_cents AS balance
            FROM vaults WHERE balance_cents <> 0
          UNION ALL
          SELECT 'treasury', partner_id::text, currency, ledger_account_id('treasury', partner_id::text, currency), balance_cents
            FROM treasuries WHERE balance_cents <> 0
          UNION ALL
          SELECT 'user', user_id::text, currency, ledger_account_id('user', user_id::text, currency),
                 sum(CASE direction WHEN 'credit' THEN amount_cents ELSE -amount_cents END)
            FROM ledger_entries WHERE status = 'settled' GROUP BY user_id, currency
           HAVING sum(CASE direction WHEN 'credit' THEN amount_cents ELSE -amount_cents END) <> 0) a`;

/**
 * A completed payment's ledger transaction and vault totals in one call: PL/pgSQL keeps the plans,
 * and the ad-hoc statement was much slower while the vault's lock is held.
 */
const RECORD_SPEND_FUNCTION = `
CREATE FUNCTION vault_record_spend(p_vault uuid, p_currency text, p_payment uuid, p_amount bigint, p_day date, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $fn$
BEGIN
  INSERT INTO ledger_transactions (id, kind, reference, created_at) VALUES (p_payment, 'payment', 'payment:' || p_payment, p_at);
  INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at)
  VALUES (p_payment, ledger_account_id('vault', p_vault::text, p_currency), -p_amount, p_currency, p_at),
         (p_payment, ledger_account_id('external', 'payments', p_currency), p_amount, p_currency, p_at);
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
