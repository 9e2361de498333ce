import type { HandlerContext } from "@connectrpc/connect";
import type { Logger } from "pino";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Db } from "../db/knex.js";
import { kClientNetwork } from "../context.js";
import { constantTimeEqual } from "../../lib/crypto.js";
import type { SecretHasher } from "../secrets/hasher.js";
import { createClientSecretChecker } from "../secrets/client-secret-checker.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import type { HostResolver } from "../net/resolver.js";
import { createClientIdMetadataResolver, isClientIdUrl } from "./client-id-metadata.js";
import type { ClientRecord, ClientsStore } from "./stores/clients.js";

export interface ClientAuthDeps {
  db: Db;
  clients: ClientsStore;
  secrets: SecretHasher;
  rateLimits: RateLimitStore;
  clock: () => Date;
  logger: Logger;
  /** Failed client-secret checks per minute per agent client id (default 30). */
  clientFailuresPerMinute?: number;
  /** Development only: fetch client metadata documents from private addresses, and http on loopback (docs/reference/agent-oauth.md). */
  clientMetadataAllowPrivate?: boolean;
  /** Resolves metadata document hosts off the thread pool (core/net/resolver.ts). */
  hostResolver?: HostResolver;
}

/** Finds OAuth clients (registered or described by a metadata document) and authenticates them. */
export interface ClientDirectory {
  /** `caller` (the client address) is what a metadata document fetch is counted against. */
  find(clientId: string, caller?: string): Promise<ClientRecord | undefined>;
  authenticate(ctx: HandlerContext, clientId: string, secret: string): Promise<ClientRecord>;
}

export function createClientDirectory(deps: ClientAuthDeps): ClientDirectory {
  // Client secrets: failures counted per client id before any derivation (right secrets
  // give their slot back), derivations scheduled fairly, verified secrets remembered.
  const secretCheck = createClientSecretChecker({
    hasher: deps.secrets,
    rateLimits: deps.rateLimits,
    clock: deps.clock,
    logger: deps.logger,
    budget: { key: "oauth-client-fail:", limit: deps.clientFailuresPerMinute ?? 30, counts: "failures" },
  });
  // OAuth clients are immutable once registered (no update or rotation RPC), so a short
  // per-process cache of their rows is safe across replicas and saves a round trip.
  const clientCache = new Map<string, { client: ClientRecord; until: number }>();
  // A client_id that is an https URL names its metadata document: fetched, checked, cached.
  const documents = createClientIdMetadataResolver({ clock: deps.clock, allowPrivate: deps.clientMetadataAllowPrivate ?? false, resolver: deps.hostResolver });
  if (deps.clientMetadataAllowPrivate) deps.logger.warn("client metadata documents may be fetched from private and loopback addresses (development setting)");

  async function find(clientId: string, caller?: string): Promise<ClientRecord | undefined> {
    if (isClientIdUrl(clientId)) return documents.resolve(clientId, caller);
    const now = Date.now();
    const hit = clientCache.get(clientId);
    if (hit && hit.until > now) return hit.client;
    const client = await deps.clients.findClient(deps.db, clientId);
    if (client) {
      if (clientCache.size > 10_000) clientCache.clear();
      clientCache.set(clientId, { client, until: now + 60_000 });
    }
    return client;
  }

  async function authenticate(ctx: HandlerContext, clientId: string, secret: string): Promise<ClientRecord> {
    if (isClientIdUrl(clientId)) {
      // A metadata-document client is public (token_endpoint_auth_method none): it proves
      // nothing here; the code it exchanges is bound to its client_id and PKCE verifier.
      if (secret) fail(Reason.INVALID_CLIENT, "a client_id metadata document client is a public client and sends no client_secret");
      return documents.resolve(clientId, ctx.values.get(kClientNetwork));
    }
    if (clientId.length === 0 || clientId.length > 128 || secret.length > 256) fail(Reason.INVALID_CLIENT, "client authentication failed");
    const client = await find(clientId);
    if (client?.tokenEndpointAuthMethod === "none") {
      if (secret) fail(Reason.INVALID_CLIENT, "a public client (token_endpoint_auth_method none) sends no client_secret");
      return client;
    }
    // Any other registered client authenticates with its secret (an empty one never verifies).
    if (secret.length === 0) fail(Reason.INVALID_CLIENT, "client authentication failed");
    const stored = client?.secretHash ?? undefined;
    const remembered = stored !== undefined ? secretCheck.remembered(clientId, secret) : undefined;
    if (client && remembered !== undefined && constantTimeEqual(remembered, stored!)) return client;
    // Unknown clients cost the same derivation as a wrong secret, so timing tells nothing.
    const checked = await secretCheck.check(clientId, secret, stored, ctx.values.get(kClientNetwork), ctx.signal);
    if (!client || !checked.ok) fail(Reason.INVALID_CLIENT, "client authentication failed");
    // A hash of older scrypt parameters is replaced once (a concurrent check may have done it).
    if (checked.upgrade) {
      const replaced = await deps.clients.replaceClientSecretHash(deps.db, clientId, checked.hash, checked.upgrade);
      if (replaced) clientCache.delete(clientId);
      secretCheck.remember(clientId, secret, replaced ? checked.upgrade : checked.hash);
    }
    return client;
  }

  return { find, authenticate };
}
