import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Logger } from "pino";
import type { IssueTokenRequest, IssueTokenResponseSchema } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail, errorDetailOf } from "../errors.js";
import { callFacts, kClientNetwork } from "../context.js";
import { callerTransaction, leftWhileWaiting } from "../deadlines.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import type { Keyring } from "../keys/keyring.js";
import type { PartnersStore } from "./store.js";
import { constantTimeEqual } from "../../lib/crypto.js";
import type { SecretHasher } from "../secrets/hasher.js";
import { createClientSecretChecker, type ClientSecretChecker } from "../secrets/client-secret-checker.js";
import { createAddressSampler } from "../secrets/address-sampler.js";
import { createTimingMirror, type TimingMirror } from "../secrets/timing-mirror.js";
import { resolveTokenScopes } from "./scopes.js";
import { PARTNER_TOKEN_HEADER, PARTNER_TOKEN_TTL_SECONDS, partnerTokenClaims } from "./token-claims.js";

export interface IssuanceGuardsDeps {
  secrets: SecretHasher;
  rateLimits: RateLimitStore;
  clock: () => Date;
  logger: Logger;
  /** 30 issuances per minute per client, failures included. */
  issuanceLimitPerMinute: number;
  /** Unregistered client ids counted one by one (default 100,000). */
  unknownClientIds?: number;
}

/** The flood and secret-check state IssueToken keeps across calls: one per service. */
export interface IssuanceGuards {
  secretCheck: ClientSecretChecker;
  unknownFailures: ReturnType<typeof createAddressSampler>;
  failureWrites: TimingMirror;
}

/** Audit of a failed issuance, outside any transaction. */
export interface IssuanceAuditDeps {
  db: Db;
  audit: Pick<AuditStore, "append">;
  clock: () => Date;
}

export interface IssueTokenDeps extends IssuanceAuditDeps {
  store: Pick<PartnersStore, "findByClientId" | "lockByClientId" | "update">;
  /** refreshIfStale() before the transaction, current() under the row lock: the client's own errors come first. */
  keyring: Pick<Keyring, "refreshIfStale" | "current" | "problem" | "signJwt">;
  issuer: string;
  audience: string;
  guards: IssuanceGuards;
}

const ISSUE_ACTION = "partner.token.issue";
const MAX_CLIENT_ID = 128;
const MAX_SECRET = 256;

export function createIssuanceGuards(deps: IssuanceGuardsDeps): IssuanceGuards {
  // Per client: every issuance attempt counts (30 a minute), failures included, taken
  // before any derivation; the derivation itself is scheduled fairly (core/secrets).
  const secretCheck = createClientSecretChecker({
    hasher: deps.secrets,
    rateLimits: deps.rateLimits,
    clock: deps.clock,
    logger: deps.logger,
    budget: { key: "partner-token:", limit: deps.issuanceLimitPerMinute, counts: "attempts" },
    unknownClientIds: deps.unknownClientIds,
  });

  // A client id nobody registered is no client's attempt: its failures are audited once a
  // minute per address, with how many went unrecorded before, and the rest wait as long as
  // a failure's audit write takes, so they answer in the same time as a known client's.
  return { secretCheck, unknownFailures: createAddressSampler(60_000), failureWrites: createTimingMirror() };
}

/** PartnersService.IssueToken: a client-credentials access token for an active partner. */
export async function issueToken(
  deps: IssueTokenDeps,
  req: IssueTokenRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof IssueTokenResponseSchema>> {
  const { db, store, audit } = deps;
  const { secretCheck } = deps.guards;
  const clientId = req.clientId;
  const actor = `partner:${clientId.slice(0, MAX_CLIENT_ID)}`;
  if (clientId.length === 0 || clientId.length > MAX_CLIENT_ID) {
    // An id of no registered client's shape is audited as an unknown one.
    await auditIssueFailure(deps, ctx, actor, false, "invalid_client");
    fail(Reason.INVALID_CLIENT, "client authentication failed");
  }
  // A secret longer than any issued one cannot be right: it is checked as the empty secret,
  // so it counts against the client's limit and costs and answers exactly like a wrong one.
  const secret = req.clientSecret.length > MAX_SECRET ? "" : req.clientSecret;

  // A secret that verified recently skips the derivation, nothing else: the attempt is
  // still counted and decided under the row lock below.
  const cachedHash = secretCheck.remembered(clientId, secret);
  let verifiedHash: string;
  let upgrade: string | undefined;
  if (cachedHash !== undefined) {
    await auditRefusal(deps, ctx, actor, true, () => secretCheck.count(clientId));
    verifiedHash = cachedHash;
  } else {
    // Unknown clients cost the same derivation as a wrong secret.
    const candidate = await store.findByClientId(clientId);
    // Shed from memory, before the count and its audit row: not audited one by one.
    secretCheck.admit(clientId, candidate?.secretHash, ctx.values.get(kClientNetwork));
    const known = candidate !== undefined;
    const checked = await auditRefusal(deps, ctx, actor, known, () =>
      secretCheck.check(clientId, secret, candidate?.secretHash, ctx.values.get(kClientNetwork), ctx.signal),
    );
    if (!checked.ok) {
      await auditIssueFailure(deps, ctx, actor, known, "invalid_client");
      fail(Reason.INVALID_CLIENT, "client authentication failed");
    }
    verifiedHash = checked.hash;
    upgrade = checked.upgrade;
  }

  let provenHash = verifiedHash;
  try {
    // Not inside the transaction: a reread of key states then waits for a connection that
    // locked transactions hold, and a pool full of them waits forever (until acquire times out).
    await deps.keyring.refreshIfStale();
    const issued = await callerTransaction(db, ctx.signal, "before the token was issued", async (trx) => {
      // The row stays locked through decision and signing so rotation and suspension are
      // ordered against this issuance; the costly derivation ran before the lock, so confirm
      // it checked the hash current under the lock (a rotation in between fails closed).
      const partner = await store.lockByClientId(trx, clientId);
      // Besides the hash it was checked against, the secret is proven for a rehash of it
      // that this or a concurrent issuance of this process stored.
      const current = (h: string | undefined) => h !== undefined && partner !== undefined && constantTimeEqual(partner.secretHash, h);
      if (!partner || !(current(verifiedHash) || current(upgrade) || current(secretCheck.remembered(clientId, secret)))) {
        secretCheck.forget(clientId, secret);
        fail(Reason.INVALID_CLIENT, "client authentication failed");
      }
      if (partner.status !== "active") {
        fail(Reason.CLIENT_INACTIVE, `client is ${partner.status}`);
      }
      const scopes = resolveTokenScopes(req.scope, partner.entitlements);
      if (!scopes.ok) fail(Reason.INVALID_SCOPE, "requested scope exceeds the client's entitlements");
      if (!deps.keyring.current()) fail(Reason.SIGNING_UNAVAILABLE, "signing is unavailable", {}, deps.keyring.problem());

      const now = deps.clock();
      const claims = partnerTokenClaims({ issuer: deps.issuer, audience: deps.audience, clientId, scopes: scopes.scopes, now });
      const accessToken = deps.keyring.signJwt(PARTNER_TOKEN_HEADER, claims);
      try {
        await audit.append(trx, {
          ...callFacts(ctx),
          actor,
          action: ISSUE_ACTION,
          outcome: "success",
          subject: claims.jti,
          at: now,
        });
      } catch (err) {
        fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
      }
      // A hash made with older scrypt parameters is replaced now that the secret proved right.
      provenHash = partner.secretHash;
      if (upgrade && current(verifiedHash)) provenHash = (await store.update(trx, clientId, { secretHash: upgrade }, now))!.secretHash;
      return { accessToken, tokenType: "Bearer", expiresIn: BigInt(PARTNER_TOKEN_TTL_SECONDS), scope: claims.scope };
    });
    secretCheck.remember(clientId, secret, provenHash);
    return issued;
  } catch (err) {
    const detail = errorDetailOf(err);
    if (detail && detail.reason !== Reason.AUDIT_UNAVAILABLE) {
      await auditFailure(deps, ctx, actor, ISSUE_ACTION, reasonLabel(detail.reason));
    }
    throw err;
  }
}

/** Records a failed attempt outside the rolled-back transaction; if even that fails, withhold (503). */
async function auditFailure(deps: IssuanceAuditDeps, ctx: HandlerContext, actor: string, action: string, reason: string, subject = "") {
  try {
    await deps.audit.append(deps.db, {
      ...callFacts(ctx),
      actor,
      action,
      outcome: "failure",
      reason,
      subject,
      at: deps.clock(),
    });
  } catch (err) {
    fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
  }
}

/** Audits a failed issuance: always for a registered client, sampled per address for an unknown one. */
async function auditIssueFailure(deps: IssuanceAuditDeps & { guards: IssuanceGuards }, ctx: HandlerContext, actor: string, known: boolean, reason: string) {
  const { unknownFailures, failureWrites } = deps.guards;
  if (known) return failureWrites.time(() => auditFailure(deps, ctx, actor, ISSUE_ACTION, reason));
  const sampled = unknownFailures.take(ctx.values.get(kClientNetwork), deps.clock().getTime());
  if (!sampled) return failureWrites.wait();
  const subject = sampled.unrecorded > 0 ? `unrecorded_before:${sampled.unrecorded}` : "";
  await failureWrites.time(() => auditFailure(deps, ctx, actor, ISSUE_ACTION, reason, subject));
}

/** Audits a refusal with a domain reason (rate limited, shed) and passes it on. */
async function auditRefusal<T>(
  deps: IssuanceAuditDeps & { guards: IssuanceGuards },
  ctx: HandlerContext,
  actor: string,
  known: boolean,
  work: () => Promise<T>,
): Promise<T> {
  try {
    return await work();
  } catch (err) {
    // A caller that left while it waited (its deadline passed) was refused nothing: no record.
    if (!leftWhileWaiting(ctx.signal, err)) await auditIssueFailure(deps, ctx, actor, known, reasonLabel(errorDetailOf(err)?.reason ?? Reason.INTERNAL));
    throw err;
  }
}

/** The audit `reason` label of a failure: the snake_case Reason name. */
function reasonLabel(reason: Reason): string {
  return (Reason[reason] ?? "unspecified").toLowerCase();
}
