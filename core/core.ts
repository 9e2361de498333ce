import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import { pollLoop } from "../lib/poll-loop.js";
import type { Logger } from "pino";
import type { PrivateKeyAccount } from "viem/accounts";
import { createDb, type Db, type DbOptions } from "./db/knex.js";
import { migrateLatest } from "./db/migrate.js";
import { createKeyring, type Keyring, type KeyringOptions } from "./keys/keyring.js";
import { createAuditStore, type AuditStoreOptions } from "./audit/store.js";
import { createAuditService } from "./audit/service.js";
import { createLedgerStore } from "./ledger/store.js";
import { createPartnersStore } from "./partners/store.js";
import { createUsersStore } from "./identity/users-store.js";
import { createPartnersService } from "./partners/service.js";
import { createSecretHasher, type ScryptParams, type SecretHasherOptions } from "./secrets/hasher.js";
import { createRateLimitStore } from "./rate-limits/store.js";
import { createGrantsService } from "./grants/service.js";
import { createHealthService } from "./health.js";
import { createCursorCodec, loadInstanceSecret } from "./paging.js";
import { createCoreInterceptors } from "./interceptors.js";
import { createRoutes } from "./routes.js";
import { registerCoreMetrics, sharedReader } from "./observability/metrics.js";
import { createBudgetsService, type BudgetsFaults } from "./budgets/service.js";
import { createBudgetsStore, createGrantVaultsStore, payingAgent } from "./budgets/store.js";
import { paymentsSignCheck, refundsFollowCloses } from "./budgets/settlement-rules.js";
import { createResourcesStore } from "./partners/resources-store.js";
import { createPartnerTokenVerifier } from "./partners/access-token.js";
import { createPartnerAccess } from "./partners/access.js";
import { createPartnerResourcesService } from "./partners/resources-service.js";
import { createSandboxKycProvider, type KycProvider } from "./partners/kyc-providers.js";
import { createOutboxStore } from "./partners/webhooks/outbox-store.js";
import { createSecretBox } from "../lib/crypto.js";
import { moveWebhookKeyOutOfDatabase } from "./partners/webhooks/key-move.js";
import { loadCheckedOutsideKey, type OutsideKeyName } from "./keys/outside-keys.js";
import { createHostResolver, type HostResolverOptions } from "./net/resolver.js";
import { createMailer } from "./identity/mail/mailer.js";
import { createOidcSignin, type OidcProviderSettings } from "./identity/oidc.js";
import { createPasskeys } from "./identity/passkeys.js";
import { SESSION_TTL_MS } from "./identity/signin.js";
import { createSmtpTransport, type SmtpSettings } from "./identity/mail/transport.js";
import { createMailWorker, type MailWorker, type MailWorkerOptions } from "./identity/mail/worker.js";
import { createWebhookWorker, type WebhookWorker, type WebhookWorkerOptions } from "./partners/webhooks/worker.js";
import { createTreasuryStore } from "./treasury/store.js";
import { createTreasuryService, type TreasuryFaults } from "./treasury/service.js";
import { createAccessTokenVerifier } from "./grants/access-token.js";
import { createSessionVerifier } from "./identity/sessions.js";
import { createSignInStore } from "./identity/signin-store.js";
import { createPruner, type PruneReport, type Retention } from "./maintenance/pruner.js";
import type { SettlementSettings } from "./settlement/config.js";
import { auditSettlement, loadHotWallets, startSettlement, type Settlement, type SettlementOptions } from "./settlement/settlement.js";
import { settlementLedgerHooks } from "./settlement/ledger.js";

/** The signing key's settings are the keyring's own (core/keys/keyring.ts). */
export interface CoreOptions extends Pick<KeyringOptions, "signingKey" | "dataDir" | "keyStateTtlMs" | "unknownKidRereadMs"> {
  db: DbOptions | { instance: Db };
  logger: Logger;
  /** Operator credential for admin RPCs. */
  adminToken: string | undefined;
  /** Gateway credential: a gateway presenting it may vouch for the client address it saw. */
  gatewayToken?: string;
  /** WEBHOOK_SECRET_KEY: encrypts stored webhook secrets; else a key file in dataDir (docs/deploying.md). */
  webhookSecretKey?: string;
  /** SIGNIN_CODE_KEY: keys sign-in code hashes and the dev outbox; else a key file in dataDir. */
  signinCodeKey?: string;
  issuer: string;
  partnerAudience: string;
  clock?: () => Date;
  /** Per client per minute, failures included; configurable for tests and deployments. */
  tokenIssuanceLimitPerMinute?: number;
  scrypt?: ScryptParams;
  /** Bounds of the shared secret-check gate (docs/reference/partner-token.md); defaults 2 / 64 / 8 / 1000 ms. */
  secretChecks?: Pick<SecretHasherOptions, "maxConcurrent" | "maxQueue" | "maxPerFlow" | "maxWaitMs">;
  /** Failed agent client-secret checks per client id per minute (docs/reference/partner-token.md); default 30. */
  clientSecretFailuresPerMinute?: number;
  /** Unregistered partner client ids whose attempts are counted one by one (default 100,000). */
  unknownClientIds?: number;
  /** Test-only seam: see AuditStoreOptions. */
  auditFaults?: AuditStoreOptions;
  /** Run migrations on start (default true). */
  migrate?: boolean;
  /** `{app_url}`: where owners approve step-ups (budgets, payments). */
  appUrl?: string;
  /** AUTH_URL, the consent page's address (passkeys accept its origin when their RP ID covers it). */
  authUrl?: string;
  /** Budget provisioning starts per parent vault per minute (default 10). */
  provisioningLimitPerMinute?: number;
  /** Test-only seam: see BudgetsFaults. */
  budgetFaults?: BudgetsFaults;
  /** Run the stuck-provisioning reaper every this many ms; absent = only on demand. */
  reaperIntervalMs?: number;
  /** Prune expired rows (core/maintenance/pruner.ts) every this many ms; absent = only on demand (Core.prune). */
  pruneIntervalMs?: number;
  /** Retention of pruned rows; defaults in core/maintenance/pruner.ts (docs/architecture.md). */
  retention?: Partial<Retention>;
  /** Partner resource limits per minute per partner and operation (docs/reference/partner-api.md); `default` covers unnamed ones. */
  resourceRateLimits?: Record<string, number>;
  /** Base URL of the built-in sandbox KYC provider's hosted pages. */
  kycSandboxUrl?: string;
  /** Extra verification providers (the sandbox is always present). */
  kycProviders?: KycProvider[];
  /** Webhook delivery loop period in ms; 0 = no background loop (tests drive webhooks.runOnce()). */
  webhookPollMs?: number;
  /** Backoff and lease tuning of webhook delivery. */
  webhookDelivery?: Pick<WebhookWorkerOptions, "baseDelayMs" | "maxDelayMs" | "maxAttempts" | "leaseMs" | "timeoutMs">;
  /** Development only: deliver webhooks to private, loopback and link-local addresses (docs/reference/partner-api.md); default false. */
  webhookAllowPrivate?: boolean;
  /** Test-only seam: see TreasuryFaults. */
  treasuryFaults?: TreasuryFaults;
  /** MCP_URL: first `aud` of agent tokens; default the issuer. */
  mcpUrl?: string;
  /** URN_NAMESPACE of vault URNs; default "vaultgate". */
  urnNamespace?: string;
  /** Refresh-token reuse grace window in seconds; default 30. */
  refreshGraceSeconds?: number;
  /** Dynamic client registrations per client address (vouched by a gateway) per minute (docs/reference/agent-oauth.md); default 20. */
  registrationLimitPerMinute?: number;
  /** Code, passkey and provider sign-ins started without a session, per client address per minute (docs/reference/agent-oauth.md); default 30. */
  signinFlowStartsPerMinute?: number;
  /** Development only: fetch OAuth client metadata documents from private/loopback addresses, http on loopback (docs/reference/agent-oauth.md); default false. */
  clientMetadataAllowPrivate?: boolean;
  /** Name servers and timeout of the lookups for client metadata documents and webhook URLs, and the former's concurrency; default the system's servers. */
  hostResolver?: HostResolverOptions;
  /** Which chains settle on the evm rail (core/settlement/config.ts); absent = every chain on the sandbox rail. */
  settlement?: SettlementSettings;
  /** The evm chains' hot wallets, when the caller loaded them before opening the database (loadHotWallets). */
  hotWallets?: ReadonlyMap<string, PrivateKeyAccount>;
  /** The settlement worker's loop period in ms (default 1000; 0 = no loop) and its tuning, for tests. */
  settlementPollMs?: number;
  settlementWorker?: SettlementOptions["worker"];
  /** Trace every RPC as an OpenTelemetry span (a tracer provider must be registered: cli/tracing.ts); default off. */
  tracing?: boolean;
  /** SMTP_URL + MAIL_FROM: account mail sent by SMTP from the mail outbox; absent = the dev outbox. */
  smtp?: SmtpSettings;
  /** Mail sender loop period in ms (default 1000); 0 = no loop (tests drive mail.runOnce()). */
  mailPollMs?: number;
  /** OIDC_ISSUER, OIDC_CLIENT_ID, OIDC_CLIENT_SECRET, OIDC_STEP_UP_ACR: sign-in at an organisation's provider; absent = not offered. */
  oidc?: OidcProviderSettings;
  /** SIGNIN_METHODS, enforced here; absent = e-mail codes and passkeys (and oidc when configured) offered. */
  signinMethods?: readonly string[];
  /** Backoff tuning of the mail sender. */
  mailDelivery?: Pick<MailWorkerOptions, "baseDelayMs" | "maxDelayMs" | "leaseMs">;
}

export interface Core {
  routes: (router: ConnectRouter) => void;
  interceptors: Interceptor[];
  db: Db;
  keyring: Keyring;
  /** One pass of the stuck-provisioning reaper (also run on reaperIntervalMs). */
  reapProvisioning(): Promise<number>;
  /** One pass of the pruner (also run on pruneIntervalMs). */
  prune(): Promise<PruneReport>;
  close(): Promise<void>;
  /** The webhook delivery worker (started here, stopped by close()). */
  webhooks: WebhookWorker;
  /** Rails, hot wallets and the settlement worker (started here, stopped by close()). */
  settlement: Settlement;
  /** The SMTP sender of the mail outbox; undefined when mail stays in the dev outbox. */
  mail: MailWorker | undefined;
}

/** Composition of core: database, keys, stores and services, ready to serve. */
export async function createCore(options: CoreOptions): Promise<Core> {
  // A hot wallet's bad key file refuses the start before the database is opened or migrated.
  const wallets = options.hotWallets ?? (await loadHotWallets(options.settlement ?? { evm: [] }, options.dataDir));
  const ownsDb = !("instance" in options.db);
  const logger = options.logger;
  const db = "instance" in options.db ? options.db.instance : createDb({ ...options.db, warn: (line) => logger.warn(line) });
  const clock = options.clock ?? (() => new Date());
  let settlement: Settlement | undefined;
  try {
    if (options.migrate !== false) await migrateLatest(db);
    const keyring = await createKeyring({ ...options, db, logger, clock });
    const audit = createAuditStore(db, options.auditFaults);
    const ledger = createLedgerStore(db);
    const cursors = createCursorCodec(await loadInstanceSecret(db, "cursor"));
    const secrets = await createSecretHasher({
      params: options.scrypt,
      ...options.secretChecks,
      onPriorityShortfall: ({ niced }) => {
        if (!niced) logger.warn("secret checks could not lower their CPU priority: a burst of wrong client secrets competes with serving requests");
        else
          logger.info(
            "secret checks run at nice 19 without the SCHED_IDLE policy (Linux with util-linux's chrt): a burst of wrong client secrets delays requests a little more",
          );
      },
    });
    const outbox = createOutboxStore(db);
    const outsideKey = (name: OutsideKeyName, setting: string, fromEnv: string | undefined) =>
      loadCheckedOutsideKey(db, { name, setting, fromEnv, dataDir: options.dataDir });
    const box = createSecretBox(await outsideKey("webhook-secret-key", "WEBHOOK_SECRET_KEY", options.webhookSecretKey));
    await moveWebhookKeyOutOfDatabase(db, box, logger);
    // Client metadata documents' hosts share one bounded resolver; webhooks have their own (worker.ts).
    const hostResolver = createHostResolver(options.hostResolver);
    const signinCodeKey = await outsideKey("signin-code-key", "SIGNIN_CODE_KEY", options.signinCodeKey);
    const resources = createResourcesStore(db);
    const partnerTokens = createPartnerTokenVerifier({ keyring, issuer: options.issuer, audience: options.partnerAudience, clock });
    const partnerAccess = createPartnerAccess({
      db,
      verifier: partnerTokens,
      resources,
      audit,
      clock,
      logger,
      rateLimits: { default: 1200, ...options.resourceRateLimits },
      auditFault: options.auditFaults?.appendFault,
    });

    // One verifier of agent tokens and one of web sessions for every service that takes them.
    const agentTokens = createAccessTokenVerifier({ keyring, issuer: options.issuer, mcpUrl: options.mcpUrl ?? options.issuer, clock });
    const sessions = createSessionVerifier({ db, store: createSignInStore(), clock });
    // Each settlement status change moves the books and is audited under the paying agent; budgets
    // decide where a refund into a closed budget goes, and which unsigned payments are cancelled.
    settlement = await startSettlement({
      db,
      logger,
      clock,
      settings: options.settlement ?? { evm: [] },
      wallets,
      pollMs: options.settlementPollMs ?? 1000,
      worker: options.settlementWorker,
      hooks: {
        ...settlementLedgerHooks(
          clock,
          async (trx, p) => auditSettlement(trx, audit, p, clock(), await payingAgent(trx, p.paymentId)),
          refundsFollowCloses({ audit }),
        ),
        signCheck: paymentsSignCheck(db),
      },
    });
    const budgetsStore = createBudgetsStore(db);
    const budgets = createBudgetsService({
      settlement,
      db,
      store: budgetsStore,
      audit,
      rateLimits: createRateLimitStore(db),
      cursors,
      clock,
      verifier: agentTokens,
      sessions,
      appUrl: options.appUrl ?? options.issuer,
      provisioningLimitPerMinute: options.provisioningLimitPerMinute ?? 10,
      faults: options.budgetFaults,
      auditFault: options.auditFaults?.appendFault,
      logger,
    });
    const mailer = createMailer({ db, signinCodeKey, smtp: options.smtp });
    const on = (method: string) => !options.signinMethods || options.signinMethods.includes(method);
    const oidcSettings = on("oidc") ? options.oidc : undefined;
    const identity = { db, audit, clock, logger, sessionTtlMs: SESSION_TTL_MS };
    logger.info(mailer.describe());
    const routes = createRoutes({
      health: createHealthService({ db, keyring, audit, settlementReady: settlement.ready }),
      audit: createAuditService({ store: audit, cursors, ledger, settlement }),
      grants: createGrantsService({
        cursors,
        verifier: agentTokens,
        sessions,
        db,
        keyring,
        audit,
        clock,
        secrets,
        rateLimits: createRateLimitStore(db),
        logger,
        issuer: options.issuer,
        mcpUrl: options.mcpUrl ?? options.issuer,
        urnNamespace: options.urnNamespace ?? "vaultgate",
        refreshGraceSeconds: options.refreshGraceSeconds ?? 30,
        registrationLimitPerMinute: options.registrationLimitPerMinute ?? 20,
        signinFlowStartsPerMinute: options.signinFlowStartsPerMinute,
        clientFailuresPerMinute: options.clientSecretFailuresPerMinute ?? 30,
        clientMetadataAllowPrivate: options.clientMetadataAllowPrivate ?? false,
        signinCodeKey,
        hostResolver,
        mailer,
        emailCodesOffered: on("email"),
        inFlight: budgets.inFlight,
        vaults: createGrantVaultsStore(),
        oidc: oidcSettings
          ? createOidcSignin({
              ...identity,
              provider: oidcSettings,
              redirectUri: `${(options.appUrl ?? options.issuer).replace(/\/+$/, "")}/signin/oidc/callback`,
            })
          : undefined,
        passkeys: createPasskeys({ ...identity, mailer, appUrl: options.appUrl ?? options.issuer, authUrl: options.authUrl, offered: on("passkey") }),
      }),
      partners: createPartnersService({
        db,
        store: createPartnersStore(db),
        users: createUsersStore(),
        audit,
        rateLimits: createRateLimitStore(db),
        secrets,
        webhookBox: box,
        keyring,
        cursors,
        clock,
        logger,
        issuer: options.issuer,
        audience: options.partnerAudience,
        issuanceLimitPerMinute: options.tokenIssuanceLimitPerMinute ?? 30,
        unknownClientIds: options.unknownClientIds,
      }),
      budgets,
      partnerResources: createPartnerResourcesService({
        db,
        access: partnerAccess,
        partners: createPartnersStore(db),
        users: createUsersStore(),
        signIn: createSignInStore(),
        mail: mailer,
        resources,
        outbox,
        audit,
        cursors,
        box,
        kycProviders: [
          createSandboxKycProvider({ baseUrl: options.kycSandboxUrl ?? "https://sandbox.kyc.vaultgate.invalid" }),
          ...(options.kycProviders ?? []),
        ],
        defaultKycProvider: "sandbox",
        clock,
        logger,
      }),
      treasury: createTreasuryService({
        db,
        store: createTreasuryStore(db),
        partners: createPartnersStore(db),
        access: partnerAccess,
        audit,
        clock,
        tokens: partnerTokens,
        faults: options.treasuryFaults,
      }),
    });
    const interceptors = createCoreInterceptors({ logger, adminToken: options.adminToken, gatewayToken: options.gatewayToken, tracing: options.tracing });
    // Last, so nothing after it can fail and leave the delivery loop running.
    const webhooks = createWebhookWorker({
      outbox,
      box,
      clock,
      logger,
      resolver: options.hostResolver,
      allowPrivate: options.webhookAllowPrivate ?? false,
      pollMs: options.webhookPollMs ?? 1000,
      ...options.webhookDelivery,
    });
    const mail = mailer.outbox
      ? createMailWorker({
          outbox: mailer.outbox,
          transport: createSmtpTransport(options.smtp!),
          clock,
          logger,
          pollMs: options.mailPollMs ?? 1000,
          ...options.mailDelivery,
        })
      : undefined;
    // Loops, not intervals: a slow pass is never overlapped, and close waits for the one in flight.
    const every = (ms: number | undefined, pass: () => Promise<unknown>, what: string) =>
      pollLoop({ intervalMs: ms ?? 0, pass, onError: (err) => logger.error({ err }, `${what} pass failed`) });
    const reaper = every(options.reaperIntervalMs, () => budgets.reap(), "provisioning reaper");
    const pruner = createPruner({ db, clock, logger, retention: options.retention });
    const pruning = every(options.pruneIntervalMs, () => pruner.runOnce(), "prune");
    const unregisterMetrics = registerCoreMetrics({ db, outboxLagSeconds: sharedReader(() => outbox.oldestDueAgeSeconds(clock())) });
    return {
      routes,
      interceptors,
      db,
      keyring,
      reapProvisioning: () => budgets.reap(),
      prune: () => pruner.runOnce(),
      webhooks,
      settlement,
      mail,
      async close() {
        await reaper.stop();
        await pruning.stop();
        await pruner.idle();
        unregisterMetrics();
        await webhooks.stop();
        await settlement!.stop();
        await mail?.stop();
        await secrets.close();
        if (ownsDb) await db.destroy();
      },
    };
  } catch (err) {
    await settlement?.stop().catch(() => {});
    if (ownsDb) await db.destroy().catch(() => {});
    throw err;
  }
}
