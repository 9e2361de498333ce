import { pollLoop } from "../lib/poll-loop.js";
import { createDb } from "./db/knex.js";
import { migrateLatest } from "./db/migrate.js";
import { createKeyring } from "./keys/keyring.js";
import { createAuditStore } from "./audit/store.js";
import { createAuditService } from "./audit/service.js";
import { createLedgerStore } from "./ledger/store.js";
import { createPartnersStore } from "./partners/store.js";
import { createUsersStore } from "./identity/users-store.js";
import { createPartnersService } from "./partners/service.js";
import { createSecretHasher } from "./secrets/hasher.js";
import { createRateLimitStore } from "./rate-limits/store.js";
import { createGrantsService } from "./grants/service.js";
import { createHealthService } from "./health.js";
import { createCursorCodec, loadInstanceSecret } from "./paging.js";
import { createCoreInterceptors } from "./interceptors.js";
import { createRoutes } from "./routes.js";
import { registerCoreMetrics, sharedReader } from "./observability/metrics.js";
import { createBudgetsService } from "./budgets/service.js";
import { createBudgetsStore, createGrantVaultsStore, payingAgent } from "./budgets/store.js";
import { paymentsSignCheck, refundsFollowCloses } from "./budgets/settlement-rules.js";
import { createResourcesStore } from "./partners/resources-store.js";
import { createPartnerTokenVerifier } from "./partners/access-token.js";
import { createPartnerAccess } from "./partners/access.js";
import { createPartnerResourcesService } from "./partners/resources-service.js";
import { createSandboxKycProvider } from "./partners/kyc-providers.js";
import { createOutboxStore } from "./partners/webhooks/outbox-store.js";
import { createSecretBox } from "../lib/crypto.js";
import { moveWebhookKeyOutOfDatabase } from "./partners/webhooks/key-move.js";
import { loadCheckedOutsideKey, type OutsideKeyName } from "./keys/outside-keys.js";
import { createHostResolver } from "./net/resolver.js";
import { createMailer } from "./identity/mail/mailer.js";
import { createOidcSignin } from "./identity/oidc.js";
import { createPasskeys } from "./identity/passkeys.js";
import { SESSION_TTL_MS } from "./identity/signin.js";
import { createSmtpTransport } from "./identity/mail/transport.js";
import { createMailWorker } from "./identity/mail/worker.js";
import { createWebhookWorker } from "./partners/webhooks/worker.js";
import { createTreasuryStore } from "./treasury/store.js";
import { createTreasuryService } from "./treasury/service.js";
import { createAccessTokenVerifier } from "./grants/access-token.js";
import { createSessionVerifier } from "./identity/sessions.js";
import { createSignInStore } from "./identity/signin-store.js";
import { createPruner } from "./maintenance/pruner.js";
import { auditSettlement, loadHotWallets, startSettlement, type Settlement } from "./settlement/settlement.js";
import { settlementLedgerHooks } from "./settlement/ledger.js";
import type { Core, CoreOptions } from "./core-options.js";

export type { Core, CoreOptions } from "./core-options.js";

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
