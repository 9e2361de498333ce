import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import { createDb, type Db, type DbOptions } from "./db/knex.js";
import { migrateLatest } from "./db/migrate.js";
import { createKeyring, type Keyring } from "./keys/keyring.js";
import { createAuditStore, type AuditStoreOptions } from "./audit/store.js";
import { createAuditService } from "./audit/service.js";
import { createPartnersStore } from "./partners/store.js";
import { createUsersStore } from "./partners/users-store.js";
import { createPartnersService } from "./partners/service.js";
import { createSecretHasher, type ScryptParams } from "./partners/credentials.js";
import { createRateLimitStore } from "./rate-limits/store.js";
import { createGrantsService } from "./grants/service.js";
import { createHealthService } from "./health.js";
import { createCursorCodec, loadInstanceSecret } from "./paging.js";
import { createCoreInterceptors } from "./interceptors.js";
import { createRoutes } from "./routes.js";
import { createGrantsStore } from "./grants/store.js";

export interface CoreOptions {
  db: DbOptions | { instance: Db };
  logger: Logger;
  /** Operator credential for admin RPCs. */
  adminToken: string | undefined;
  signingKey?: string;
  /** Where a generated dev signing key is kept; absent = in memory. */
  dataDir?: string;
  issuer: string;
  partnerAudience: string;
  clock?: () => Date;
  /** spec 8; configurable for tests and deployments. */
  tokenIssuanceLimitPerMinute?: number;
  scrypt?: ScryptParams;
  /** Test-only seam: see AuditStoreOptions. */
  auditFaults?: AuditStoreOptions;
  /** Run migrations on start (default true). */
  migrate?: boolean;
  /** MCP_URL: first `aud` of agent tokens (DESIGN 3); default the issuer. */
  mcpUrl?: string;
  /** URN_NAMESPACE of vault URNs; default "vaultgate". */
  urnNamespace?: string;
  /** Refresh-token reuse grace window in seconds (DESIGN 3); default 30. */
  refreshGraceSeconds?: number;
}

export interface Core {
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  db: Db;
  keyring: Keyring;
  close(): Promise<void>;
}

/** Composition of core: database, keys, stores and services, ready to serve. */
export async function createCore(options: CoreOptions): Promise<Core> {
  const ownsDb = !("instance" in options.db);
  const db = "instance" in options.db ? options.db.instance : createDb(options.db);
  const clock = options.clock ?? (() => new Date());
  const logger = options.logger;
  try {
    if (options.migrate !== false) await migrateLatest(db);
    const keyring = await createKeyring({ signingKey: options.signingKey, dataDir: options.dataDir, db, logger, clock });
    const audit = createAuditStore(db, options.auditFaults);
    const cursors = createCursorCodec(await loadInstanceSecret(db, "cursor"));
    const secrets = await createSecretHasher({ params: options.scrypt });

    const routes = createRoutes({
      health: createHealthService({ db, keyring }),
      audit: createAuditService({ store: audit, cursors }),
      grants: createGrantsService({
        db,
        keyring,
        audit,
        clock,
        store: createGrantsStore(db),
        secrets,
        rateLimits: createRateLimitStore(db),
        logger,
        issuer: options.issuer,
        mcpUrl: options.mcpUrl ?? options.issuer,
        urnNamespace: options.urnNamespace ?? "vaultgate",
        refreshSecret: await loadInstanceSecret(db, "refresh-token"),
        refreshGraceSeconds: options.refreshGraceSeconds ?? 30,
      }),
      partners: createPartnersService({
        db,
        store: createPartnersStore(db),
        users: createUsersStore(),
        audit,
        rateLimits: createRateLimitStore(db),
        secrets,
        keyring,
        clock,
        logger,
        issuer: options.issuer,
        audience: options.partnerAudience,
        issuanceLimitPerMinute: options.tokenIssuanceLimitPerMinute ?? 30,
      }),
    });
    const interceptors = createCoreInterceptors({ logger, adminToken: options.adminToken });
    return {
      routes,
      interceptors,
      db,
      keyring,
      async close() {
        if (ownsDb) await db.destroy();
      },
    };
  } catch (err) {
    if (ownsDb) await db.destroy().catch(() => {});
    throw err;
  }
}
