import { randomBytes } from "node:crypto";
import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { OAuthClientSchema, RegisterClientRequest } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Db } from "../db/knex.js";
import { kClientNetwork } from "../context.js";
import { callerTransaction } from "../deadlines.js";
import type { SecretHasher } from "../secrets/hasher.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import { checkClientMetadata } from "./client-metadata.js";
import { appendAudit, type AuditDeps } from "./audit.js";
import type { ClientRecord, ClientsStore } from "./stores/clients.js";

export interface RegisterClientDeps extends AuditDeps {
  db: Db;
  clients: ClientsStore;
  secrets: SecretHasher;
  rateLimits: RateLimitStore;
  /** Dynamic client registrations per minute per client address a gateway vouched for ("" = direct callers, one bucket). */
  registrationLimitPerMinute: number;
}

/** GrantsService.RegisterClient: dynamic client registration; a secret is shown once, stored as a scrypt hash. */
export async function registerClient(deps: RegisterClientDeps, req: RegisterClientRequest, ctx: HandlerContext) {
  // Before the metadata and the scrypt: a flood costs one upsert per request.
  // Per client network a gateway vouched for (kClientNetwork); every direct caller
  // shares the "" bucket, so forging an address escapes nothing.
  const limit = await deps.rateLimits.hit(`oauth-register:${ctx.values.get(kClientNetwork)}`, deps.registrationLimitPerMinute, 60, deps.clock());
  if (!limit.allowed) fail(Reason.RATE_LIMITED, "too many client registrations from this address", { retryAfterSeconds: 60 });
  const meta = checkClientMetadata(req);
  // A public client (method none) gets no secret: PKCE binds its codes, rotation its refresh tokens.
  const clientSecret = meta.tokenEndpointAuthMethod === "none" ? "" : `ags_${randomBytes(32).toString("base64url")}`;
  const secretHash = clientSecret ? await deps.secrets.hash(clientSecret, undefined, ctx.signal) : null;
  const record: ClientRecord = { ...meta, clientId: `agc_${randomBytes(12).toString("hex")}`, secretHash, createdAt: deps.clock() };
  await callerTransaction(deps.db, ctx.signal, "before the client was registered", async (trx) => {
    const { inserted } = await deps.clients.insertClient(trx, record);
    if (!inserted) fail(Reason.INTERNAL, "could not allocate a client id");
    await appendAudit(deps, trx, ctx, { actor: "anonymous", action: "oauth.client.register", subject: record.clientId });
  });
  return { client: clientInit(record), clientSecret };
}

/** A client as the API shows it (never its secret hash). */
export function clientInit(c: ClientRecord): MessageInitShape<typeof OAuthClientSchema> {
  return {
    clientId: c.clientId,
    clientName: c.clientName,
    redirectUris: c.redirectUris,
    grantTypes: c.grantTypes,
    responseTypes: c.responseTypes,
    tokenEndpointAuthMethod: c.tokenEndpointAuthMethod,
    scopes: c.scopes,
    clientIdIssuedAt: BigInt(Math.floor(c.createdAt.getTime() / 1000)),
  };
}
