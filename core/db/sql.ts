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

const NEEDS_ESCAPE = /[\\"]/;
const ESCAPED = /[\\"]/g;

/**
 * A Postgres array literal of text elements (null for SQL NULL), bound as one parameter
 * and cast in the statement (`?::uuid[]`): group-committed statements pass one array per
 * column and unnest them together.
 */
export function pgArray(values: readonly (string | null)[]): string {
  let out = "{";
  for (let i = 0; i < values.length; i++) {
    const v = values[i]!;
    if (i > 0) out += ",";
    if (v === null) out += "NULL";
    else out += `"${NEEDS_ESCAPE.test(v) ? v.replace(ESCAPED, "\\$&") : v}"`;
  }
  return out + "}";
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
