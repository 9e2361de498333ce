import type { Db } from "../core/db/knex.js";
import type { MigrationFailed } from "../core/db/migrate.js";
import type { Config } from "./config.js";

/** A driver-warning sink that holds the warnings written during a migration run, and drops them if it fails. */
export interface MigrationLines {
  warn(line: string): void;
  /** Runs `run`; what knex warned meanwhile goes on only if it succeeds (a failure is the error's one line). */
  during<T>(run: () => Promise<T>): Promise<T>;
}

/** Driver warnings go on to `forward` (stderr for `migrate`, the log for `serve`). */
export function migrationLines(forward: (line: string) => void): MigrationLines {
  let held: string[] | undefined;
  return {
    warn(line) {
      if (held) held.push(line);
      else forward(line);
    },
    async during(run) {
      const lines: string[] = [];
      held = lines;
      try {
        const result = await run();
        held = undefined;
        for (const line of lines) forward(line);
        return result;
      } finally {
        held = undefined;
      }
    },
  };
}

/** Applies pending migrations on a database opened with `lines.warn`; a failure is one line naming the migration. */
export async function applyMigrations(db: Db, lines: MigrationLines): Promise<string[]> {
  const { migrateLatest } = await import("../core/db/migrate.js");
  try {
    return await lines.during(() => migrateLatest(db));
  } catch (err) {
    throw explain(err);
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

function explain(err: unknown): unknown {
  if (!(err instanceof Error)) return err;
  if (err.name === "MigrationLocked") {
    return new Error(
      "migrations are locked (knex_migrations_lock.is_locked = 1): if no vaultgate is migrating this database, " +
        "release the lock with UPDATE knex_migrations_lock SET is_locked = 0 and run migrate again",
    );
  }
  if (err.name !== "MigrationFailed") return err;
  const { migration, cause } = err as MigrationFailed;
  const message = cause instanceof Error ? cause.message : String(cause);
  // knex prefixes the database's reason with the statement (multi-line SQL): keep the reason.
  const at = message.lastIndexOf(" - ");
  const reason = at >= 0 ? message.slice(at + 3) : message;
  return Object.assign(new Error(`migration ${migration} failed: ${reason.split("\n")[0]}`), { code: (cause as { code?: unknown }).code, cause });
}
