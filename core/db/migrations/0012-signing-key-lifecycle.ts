import type { Knex } from "knex";
import { runScript } from "../sql.js";

/**
 * Signing keys have a lifecycle (core/keys/lifecycle.ts). `rotated_at`: a newer key took
 * over; this one verifies only tokens issued up to then and leaves the JWKS once every
 * such token has expired. `retired_at`: the operator withdrew it; it verifies nothing.
 */
export async function up(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE signing_keys ADD COLUMN rotated_at timestamptz;
    ALTER TABLE signing_keys ADD COLUMN retired_at timestamptz;
  `,
  );
}

export async function down(knex: Knex): Promise<void> {
  await runScript(
    knex,
    `
    ALTER TABLE signing_keys DROP COLUMN retired_at;
    ALTER TABLE signing_keys DROP COLUMN rotated_at;
  `,
  );
}
