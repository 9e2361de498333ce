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
