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

/**
 * Applies pending migrations on a database opened with `lines.warn`; a failure is one line naming the
 * migration, or DATABASE_URL's setting to change when TLS to the server failed (`url`).
 */
export async function applyMigrations(db: Db, lines: MigrationLines, url?: string): Promise<string[]> {
  const { migrateLatest } = await import("../core/db/migrate.js");
  try {
    return await lines.during(() => migrateLatest(db));
  } catch (err) {
    throw (url && tlsRefused(err, url)) || explain(err);
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
    return { applied: await applyMigrations(db, lines, config.databaseUrl) };
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

/** The pg driver's error when the server answers the TLS request with "no". */
export const NO_TLS_MESSAGE = "The server does not support SSL connections";
/** Node's codes for a server certificate that does not chain to a trusted CA. */
const UNTRUSTED_CERTIFICATE = new Set([
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_UNTRUSTED",
]);

/** A TLS failure to the database, in one line naming DATABASE_URL and what to change in it (else undefined). */
export function tlsRefused(err: unknown, url: string): Error | undefined {
  if (!(err instanceof Error)) return undefined;
  const code = (err as { code?: unknown }).code;
  const at = `the database server at DATABASE_URL (${databaseAddress(url)})`;
  if (err.message === NO_TLS_MESSAGE)
    return new Error(
      `${at} does not accept TLS: enable ssl on the server, or set sslmode=disable in DATABASE_URL if the connection never leaves a trusted network`,
    );
  if (typeof code !== "string") return undefined;
  if (UNTRUSTED_CERTIFICATE.has(code))
    return new Error(
      `${at} presented a certificate that was not verified (${err.message}): name the CA that signed it with sslrootcert=<file> in DATABASE_URL`,
    );
  // Dates are judged by this machine's clock, so a wrong clock is the other cause.
  if (code === "CERT_HAS_EXPIRED")
    return new Error(
      `${at} presented a certificate that has expired (${err.message}): renew the server's certificate, and check that this machine's clock is right`,
    );
  if (code === "CERT_NOT_YET_VALID")
    return new Error(
      `${at} presented a certificate that is not valid yet (${err.message}): check that this machine's clock is right, and the dates of the server's certificate`,
    );
  if (code === "ERR_TLS_CERT_ALTNAME_INVALID")
    return new Error(`${at} presented a certificate for another name (${err.message}): use a host name or address the certificate names in DATABASE_URL`);
  return undefined;
}

/** host:port/db of a postgres:// URL, never its credentials. */
export function databaseAddress(url: string): string {
  try {
    const u = new URL(url);
    return `${u.hostname}:${u.port || "5432"}${u.pathname}`;
  } catch {
    return "(unparsable URL)";
  }
}
