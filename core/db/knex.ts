import knexFactory, { type Knex } from "knex";
import ClientPGLite from "knex-pglite";
import pg from "pg";
import { connectionFromUrl } from "./database-url.js";
import { lockEmbeddedDatabase } from "./embedded-lock.js";

// Money is bigint cents and stays within 2^53-1, so int8 parses to number.
pg.types.setTypeParser(pg.types.builtins.INT8, (v) => Number(v));

export interface DbOptions {
  /** A postgres:// URL; when absent the embedded PGlite database is used. */
  url?: string;
  /** PGlite data directory; absent means an in-memory database. */
  dataDir?: string;
  /** Pool size for Postgres (PGlite is always one connection). */
  poolMax?: number;
  /** Where the driver's warnings go, one line each (default: stderr); never stdout, which carries JSON. */
  warn?: (line: string) => void;
}

export type Db = Knex;

/** How knex's warning about a connection it could not open begins. */
export const ACQUIRE_FAILED = "Acquire connection error:";

/**
 * Opens the database: Postgres when a URL is given, else embedded PGlite. A failed
 * statement's message carries its SQL with placeholders, never its bound values
 * (`compileSqlOnError: false`): errors reach log lines, values may be secrets.
 */
export function createDb(options: DbOptions): Db {
  // knex prints a failed connection's stack with console.log, into the JSON log stream and CLI output.
  const warn = options.warn ?? ((line: string) => process.stderr.write(`${line}\n`));
  const log = {
    warn: (message: unknown) => {
      const line = String(message).split("\n")[0]!;
      // The caller gets the same error thrown: its own report of it is the one the operator reads.
      if (!line.startsWith(ACQUIRE_FAILED)) warn(line);
    },
  };
  if (options.url) {
    return knexFactory({
      client: "pg",
      // Parsed here, not by knex: its bundled parser keeps an IPv6 host's brackets.
      connection: connectionFromUrl(options.url) as Knex.PgConnectionConfig,
      pool: { min: 0, max: options.poolMax ?? 20 },
      compileSqlOnError: false,
      log,
    });
  }
  const release = options.dataDir ? lockEmbeddedDatabase(options.dataDir) : undefined;
  const db = knexFactory({
    client: EmbeddedClient as unknown as typeof knexFactory.Client,
    dialect: "postgres",
    connection: { connectionString: options.dataDir ?? "memory://" } as Knex.StaticConnectionConfig,
    // PGlite returns int8 as bigint; normalise to number like the pg driver above.
    postProcessResponse: normaliseBigints,
    compileSqlOnError: false,
    log,
  });
  if (release) {
    const destroy = db.destroy.bind(db) as () => Promise<void>;
    Object.defineProperty(db, "destroy", { value: () => destroy().finally(release) });
  }
  return db;
}

type Serializer = (value: unknown) => unknown;

/**
 * PGlite's client, whose parameter encoders refuse a value they would pass on unencoded (a
 * number for a text[] column): sent as is, it breaks the one connection's protocol state.
 */
class EmbeddedClient extends (ClientPGLite as unknown as new (config: unknown) => { pglite: { serializers: Record<string, Serializer> } }) {
  constructor(config: unknown) {
    super(config);
    const checked = new Map<Serializer, Serializer>();
    const check =
      (encode: Serializer): Serializer =>
      (value) => {
        const out = encode(value);
        if (typeof out === "string" || out instanceof Uint8Array) return out;
        throw new TypeError(`a ${typeof value} parameter cannot be encoded for this column`);
      };
    this.pglite.serializers = new Proxy(this.pglite.serializers, {
      get(target, key) {
        const encode = Reflect.get(target, key) as unknown;
        if (typeof encode !== "function") return encode;
        let wrapped = checked.get(encode as Serializer);
        if (!wrapped) checked.set(encode as Serializer, (wrapped = check(encode as Serializer)));
        return wrapped;
      },
    });
  }
}

function normaliseBigints(result: unknown): unknown {
  if (Array.isArray(result)) {
    for (const row of result) normaliseRow(row);
  } else if (result && typeof result === "object" && Array.isArray((result as { rows?: unknown }).rows)) {
    for (const row of (result as { rows: unknown[] }).rows) normaliseRow(row);
  }
  return result;
}

function normaliseRow(row: unknown): void {
  if (!row || typeof row !== "object") return;
  const r = row as Record<string, unknown>;
  for (const k of Object.keys(r)) if (typeof r[k] === "bigint") r[k] = Number(r[k]);
}

/** True when the driver is embedded PGlite (single connection, no concurrent transactions). */
export function isEmbedded(db: Db): boolean {
  return db.client.config.client !== "pg";
}
