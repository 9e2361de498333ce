import type { Knex } from "knex";

/**
 * A refresh may ask for less than its grant's scope (RFC 6749 6). The narrower grant keeps
 * what its lineage was given in `refresh_scopes`, so the next refresh without `scope` gets it back.
 */
const EDIT: [string, string] = [
  "o.agent_principal_id, o.vault_id, o.scopes, o.step_up",
  "o.agent_principal_id, o.vault_id, coalesce(o.refresh_scopes, o.scopes) AS scopes, o.step_up",
];

/** The fast-path refresh function as it stands, with `from` replaced by `to`, as CREATE OR REPLACE. */
async function editRefreshBatch(knex: Knex, from: string, to: string): Promise<void> {
  const { rows } = await knex.raw(`SELECT pg_get_functiondef('grant_refresh_batch'::regproc) AS def`);
  const def = String(rows[0].def);
  if (!def.includes(from)) throw new Error(`0039: grant_refresh_batch does not contain ${from}`);
  await knex.raw(def.replace(from, to));
}

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`ALTER TABLE grants ADD COLUMN refresh_scopes text[]`);
  await editRefreshBatch(knex, ...EDIT);
}

export async function down(knex: Knex): Promise<void> {
  await editRefreshBatch(knex, EDIT[1], EDIT[0]);
  await knex.raw(`ALTER TABLE grants DROP COLUMN refresh_scopes`);
}
