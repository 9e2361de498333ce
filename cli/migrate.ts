import type { Db } from "../core/db/knex.js";
import type { Config } from "./config.js";

/** knex's own lines about a failed migration: the CLI says the same in one line of its own. */
const KNEX_MIGRATION_LINE =
  /^(Can't take lock to run migrations|If you are sure migrations are not running|migration file "(.+)" failed$|migration failed with error)/;

/** A driver-warning sink that keeps knex's failed-migration lines (and the migration they name) out of the output. */
export interface MigrationLines {
  warn(line: string): void;
  /** The migration knex named as failing, once it has. */
  readonly failed: string | undefined;
}

/** Every other driver warning goes on to `forward` (stderr for `migrate`, the log for `serve`). */
export function migrationLines(forward: (line: string) => void): MigrationLines {
  let failed: string | undefined;
  return {
    warn(line) {
      const m = KNEX_MIGRATION_LINE.exec(line);
      if (!m) forward(line);
      else if (m[2]) failed = m[2];
    },
    get failed() {
      return failed;
    },
  };
}

/** Applies pending migrations on a database opened with `lines.warn`; a failure is one line naming the migration. */
export async function applyMigrations(db: Db, lines: MigrationLines): Promise<string[]> {
  const { migrateLatest } = await import("../core/db/migrate.js");
  try {
    return await migrateLatest(db);
  } catch (err) {
    throw explain(err, lines.failed);
  }
}

/** The configured database (DATABASE_URL, else the embedded one in DATA_DIR), its driver warnings to `lines`. */
export async function openDatabase(config: Config, lines: MigrationLines, poolMax?: number): Promise<Db> {
  const { createDb } = await import("../core/db/knex.js");
  return createDb(config.databaseUrl ? { url: config.databaseUrl, poolMax, warn: lines.warn } : { dataDir: `${config.dataDir}/pgdata`, warn: lines.warn });
}

/** `vaultgate migrate`: applies pending migrations and answers `{applied}`; any other driver warning still reaches stderr. */
export async function runMigrate(config: Config): Promise<{ applied: string[] }> {
  const lines = migrationLines((line) => process.stderr.write(`${line}\n`));
  const db = await openDatabase(config, lines);
  try {
    return { applied: await applyMigrations(db, lines) };
  } finally {
    await db.destroy();
  }
}

function explain(err: unknown, migration: string | undefined): unknown {
  if (!(err instanceof Error)) return err;
  if (err.name === "MigrationLocked") {
    return new Error(
      "migrations are locked (knex_migrations_lock.is_locked = 1): if no vaultgate is migrating this database, " +
        "release the lock with UPDATE knex_migrations_lock SET is_locked = 0 and run migrate again",
    );
  }
  if (!migration) return err;
  // knex prefixes the database's reason with the statement (multi-line SQL): keep the reason.
  const at = err.message.lastIndexOf(" - ");
  const reason = at >= 0 ? err.message.slice(at + 3) : err.message;
  return Object.assign(new Error(`migration ${migration} failed: ${reason.split("\n")[0]}`), { code: (err as { code?: unknown }).code, cause: err });
}
