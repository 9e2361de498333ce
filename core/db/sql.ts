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

/**
 * A call of a set-returning SQL function that takes one array per column of a batch
 * (the group-committed statements): `columns` names each parameter's element type and
 * how to read it from an item. The SQL text is built once.
 */
export function batchFunction<I>(fn: string, columns: readonly (readonly [type: string, get: (item: I) => string | null])[]) {
  const sql = `SELECT * FROM ${fn}(${columns.map(([type]) => `?::${type}[]`).join(", ")})`;
  return async (conn: Knex, items: readonly I[]): Promise<Record<string, unknown>[]> => {
    const { rows } = await conn.raw(sql, columns.map(([, get]) => pgArray(items.map(get))));
    return rows as Record<string, unknown>[];
  };
}
