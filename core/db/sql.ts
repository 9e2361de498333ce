import type { Knex } from "knex";
import { sha256Hex } from "../../lib/crypto.js";

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
  return `${out}}`;
}

/**
 * A hot statement prepared once per pooled connection, because planning it costs more than running
 * it; the name hashes the text. After a schema change invalidates cached plans the statement moves to
 * a fresh name and a call outside a transaction is retried once (PGlite ignores the name).
 */
export function prepared(label: string, sql: string) {
  const base = `vg_${label}_${sha256Hex(sql).slice(0, 12)}`;
  let generation = 0;
  const nameNow = () => (generation === 0 ? base : `${base}_${generation}`);
  return async (conn: Knex, bindings: readonly Knex.Value[]): Promise<Record<string, unknown>[]> => {
    const name = nameNow();
    try {
      const { rows } = await conn.raw(sql, bindings).options({ name });
      return rows as Record<string, unknown>[];
    } catch (err) {
      if (!isStaleResultType(err)) throw err;
      if (nameNow() === name) generation++;
      if (conn.isTransaction) throw err;
      const { rows } = await conn.raw(sql, bindings).options({ name: nameNow() });
      return rows as Record<string, unknown>[];
    }
  };
}

/** PostgreSQL's refusal of a prepared statement whose result columns changed since it was prepared. */
function isStaleResultType(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown };
  return e?.code === "0A000" && typeof e.message === "string" && e.message.includes("cached plan must not change result type");
}

/**
 * A call of a set-returning SQL function that takes one array per column of a batch
 * (the group-committed statements): `columns` names each parameter's element type and
 * how to read it from an item. The SQL text is built once, and prepared.
 */
export function batchFunction<I>(fn: string, columns: readonly (readonly [type: string, get: (item: I) => string | null])[]) {
  const run = prepared(fn, `SELECT * FROM ${fn}(${columns.map(([type]) => `?::${type}[]`).join(", ")})`);
  return (conn: Knex, items: readonly I[]): Promise<Record<string, unknown>[]> =>
    run(
      conn,
      columns.map(([, get]) => pgArray(items.map(get))),
    );
}

/**
 * A bounded batch DELETE for the pruner, bound to (cutoff, batch size): rows found through the
 * index `orderBy` names and locked SKIP LOCKED, so it never waits on traffic, and deleted by
 * ctid, because a `key IN (subquery)` form let the planner scan the whole table.
 */
export function pruneBatchSql(table: string, where: string, orderBy: string): string {
  return `DELETE FROM ${table} WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM ${table} WHERE ${where} ORDER BY ${orderBy} LIMIT ? FOR UPDATE SKIP LOCKED)) RETURNING 1`;
}
