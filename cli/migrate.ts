import type { Config } from "./config.js";

/** knex's own lines about a failed migration: the CLI says the same in one line of its own. */
const KNEX_MIGRATION_LINE =
  /^(Can't take lock to run migrations|If you are sure migrations are not running|migration file "(.+)" failed$|migration failed with error)/;

/** `vaultgate migrate`: applies pending migrations and answers `{applied}`; any other driver warning still reaches stderr. */
export async function runMigrate(config: Config): Promise<{ applied: string[] }> {
  const [{ createDb }, { migrateLatest }] = await Promise.all([import("../core/db/knex.js"), import("../core/db/migrate.js")]);
  let failed: string | undefined;
  const warn = (line: string) => {
    const m = KNEX_MIGRATION_LINE.exec(line);
    if (!m) process.stderr.write(`${line}\n`);
    else if (m[2]) failed = m[2];
  };
  const db = createDb(config.databaseUrl ? { url: config.databaseUrl, warn } : { dataDir: `${config.dataDir}/pgdata`, warn });
  try {
    return { applied: await migrateLatest(db) };
  } catch (err) {
    throw explain(err, failed);
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
