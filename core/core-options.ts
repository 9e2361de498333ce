import type { ConnectRouter, Interceptor } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { PrivateKeyAccount } from "viem/accounts";
import type { Db, DbOptions } from "./db/knex.js";
import type { Keyring, KeyringOptions } from "./keys/keyring.js";
import type { AuditStoreOptions } from "./audit/store.js";
import type { ScryptParams, SecretHasherOptions } from "./secrets/hasher.js";
import type { BudgetsFaults } from "./budgets/service.js";
import type { KycProvider } from "./partners/kyc-providers.js";
import type { HostResolverOptions } from "./net/resolver.js";
import type { OidcProviderSettings } from "./identity/oidc.js";
import type { SmtpSettings } from "./identity/mail/transport.js";
import type { MailWorker, MailWorkerOptions } from "./identity/mail/worker.js";
import type { WebhookWorker, WebhookWorkerOptions } from "./partners/webhooks/worker.js";
import type { TreasuryFaults } from "./treasury/service.js";
import type { PruneReport, Retention } from "./maintenance/pruner.js";
import type { SettlementSettings } from "./settlement/config.js";
import type { Settlement, SettlementOptions } from "./settlement/settlement.js";

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
