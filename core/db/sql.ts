import type { Knex } from "knex";

/**
 * Runs a multi-statement SQL script one statement at a time: PGlite executes
 * every query as a single prepared statement. Statements end with ';' at a line end.
 */
export async function runScript(knex: Knex, script: string): Promise<void> {
  const statements = script
    .split(/;\s*$/m)
    .map((s) => s.replace(/^\s*--.*$/gm, "").trim())
    .filter((s) => s.length > 0);
  for (const statement of statements) await knex.raw(statement);
}

/**
 * A Postgres array literal of text elements (null for SQL NULL), bound as one parameter
 * and cast in the statement (`?::uuid[]`): group-committed statements pass one array per
 * column and unnest them together.
 */
export function pgArray(values: readonly (string | null)[]): string {
  return `{${values.map((v) => (v === null ? "NULL" : `"${v.replace(/[\\"]/g, "\\$&")}"`)).join(",")}}`;
}
