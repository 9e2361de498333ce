import type { Knex } from "knex";
import type { Db } from "./knex.js";
import * as m0001 from "./migrations/0001-platform.js";
import * as m0002 from "./migrations/0002-identity.js";
import * as m0006 from "./migrations/0006-budgets.js";

interface Migration {
  name: string;
  up(knex: Knex): Promise<void>;
  down(knex: Knex): Promise<void>;
}

/** Every migration in order. Append only; never edit a migration that has shipped. */
const migrations: Migration[] = [
  { name: "0001-platform", ...m0001 },
  { name: "0002-identity", ...m0002 },
  { name: "0006-budgets", ...m0006 },
];

const source: Knex.MigrationSource<Migration> = {
  getMigrations: async () => migrations,
  getMigrationName: (m) => m.name,
  getMigration: async (m) => m,
};

const config = { migrationSource: source, tableName: "knex_migrations" };

/**
 * Applies pending migrations under knex's migration lock. Replicas starting together
 * wait for the one holding the lock instead of failing.
 */
export async function migrateLatest(db: Db, { waitMs = 60_000 } = {}): Promise<string[]> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      const [, applied] = (await db.migrate.latest(config)) as [number, string[]];
      return applied;
    } catch (err) {
      const locked = err instanceof Error && err.name === "MigrationLocked";
      if (!locked || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

/** True when every known migration has been applied. */
export async function migrationsCurrent(db: Db): Promise<boolean> {
  const [, pending] = (await db.migrate.list(config)) as [unknown[], unknown[]];
  return pending.length === 0;
}
