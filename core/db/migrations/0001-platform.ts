import type { Knex } from "knex";
import { runScript } from "../sql.js";

/** Partners, credentials, audit trail, shared rate-limit log, published keys, instance secrets. */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    CREATE TABLE partners (
      id            uuid PRIMARY KEY,
      name          text NOT NULL,
      slug          text NOT NULL,
      client_id     text NOT NULL UNIQUE,
      secret_hash   text NOT NULL,
      status        text NOT NULL CHECK (status IN ('active', 'pending', 'suspended')),
      entitlements  text[] NOT NULL,
      webhook_url   text,
      created_at    timestamptz NOT NULL,
      updated_at    timestamptz NOT NULL
    );

    CREATE TABLE audit_records (
      seq         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      request_id  text NOT NULL,
      actor       text NOT NULL,
      action      text NOT NULL,
      outcome     text NOT NULL CHECK (outcome IN ('success', 'failure')),
      reason      text NOT NULL DEFAULT '',
      subject     text NOT NULL DEFAULT '',
      created_at  timestamptz NOT NULL
    );
    CREATE INDEX audit_records_request_id ON audit_records (request_id);

    -- Append-only: the database itself refuses to change or remove a record.
    CREATE FUNCTION audit_records_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN RAISE EXCEPTION 'audit_records is append-only'; END $$;
    CREATE TRIGGER audit_records_append_only BEFORE UPDATE OR DELETE OR TRUNCATE ON audit_records
      FOR EACH STATEMENT EXECUTE FUNCTION audit_records_append_only();

    -- Sliding-window log per key: the attempt times inside the window (at most the
    -- limit), exact where a fixed window would let 2x the limit through across a
    -- boundary, and updated in one atomic upsert.
    CREATE TABLE rate_limit_logs (
      key      text PRIMARY KEY,
      hits     timestamptz[] NOT NULL,
      allowed  boolean NOT NULL
    );

    CREATE TABLE signing_keys (
      kid         text PRIMARY KEY,
      public_jwk  jsonb NOT NULL,
      created_at  timestamptz NOT NULL
    );

    CREATE TABLE instance_secrets (
      name   text PRIMARY KEY,
      value  bytea NOT NULL
    );
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `DROP TABLE instance_secrets, signing_keys, rate_limit_logs, audit_records, partners;
    DROP FUNCTION audit_records_append_only`,
  );
}
