/** PartnerResourcesService: a partner's event feed and its webhook endpoint. */

import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { ListEventsRequest, ListEventsResponseSchema, SetWebhookRequest, SetWebhookResponseSchema } from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Db } from "../db/knex.js";
import type { PartnerAccess } from "./access.js";
import type { PartnersStore } from "./store.js";
import { eventTypesFor, WEBHOOK_SECRET_OVERLAP_MS, type OutboxStore, type WebhookSecrets } from "./webhooks/outbox-store.js";
import { generateWebhookSecret, isCanonicalWebhookSecret, type SecretBox } from "./webhooks/signing.js";
import { checkHttpsUrl } from "./resources-wire.js";
import { adminChange, type AdminChangeDeps } from "./resources-changes.js";
import { pageOut, position, type PagingDeps } from "./resources-paging.js";

/** What PartnerResourcesService.ListEvents needs. */
export interface ListEventsDeps extends PagingDeps {
  db: Db;
  access: Pick<PartnerAccess, "authorize" | "audited" | "refusalsAudited">;
  outbox: Pick<OutboxStore, "list">;
}

/** What PartnerResourcesService.SetWebhook needs. */
export interface SetWebhookDeps extends AdminChangeDeps {
  partners: Pick<PartnersStore, "lockByClientId">;
  outbox: Pick<OutboxStore, "setWebhook" | "webhookSecrets">;
  box: Pick<SecretBox, "seal" | "open">;
}

/** PartnerResourcesService.ListEvents: one page of the calling partner's events, oldest first. */
export async function listEvents(
  deps: ListEventsDeps,
  req: ListEventsRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof ListEventsResponseSchema>> {
  const principal = await deps.access.authorize(ctx, {
    token: req.accessToken,
    operation: "events.read",
    requestProblem: req.requestProblem,
    edgeRejection: req.edgeRejection,
  });
  const binding = `e:${principal.partnerId}`;
  const { after, limit } = await deps.access.refusalsAudited(ctx, principal, "events.read", "", async () => position(deps, req.page, binding));
  const rows = await deps.outbox.list(deps.db, principal.partnerId, eventTypesFor(principal.tokenScopes), after, limit + 1);
  const out = pageOut(deps, rows, limit, after, binding);
  await deps.access.audited(ctx, principal, "events.read", "");
  return {
    data: out.page.map((e) => ({ eventId: e.id, type: e.type, createdAt: e.createdAt.toISOString(), dataJson: JSON.stringify(e.data) })),
    nextCursor: out.nextCursor,
    watermark: out.watermark,
  };
}

/** PartnerResourcesService.SetWebhook: the operator sets (or, with no url, clears) a partner's endpoint and secret. */
export async function setWebhook(
  deps: SetWebhookDeps,
  req: SetWebhookRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof SetWebhookResponseSchema>> {
  const url = req.url ? checkHttpsUrl(req.url, "url") : null;
  // Removing the URL forgets every secret: one sent with it would be dropped unseen.
  if (!url && req.secret) fail(Reason.INVALID_REQUEST, "a secret needs a url; to remove the webhook, send neither");
  let secret = req.secret;
  if (secret && !isCanonicalWebhookSecret(secret)) {
    fail(Reason.INVALID_REQUEST, "secret must be whsec_ followed by 24 to 64 bytes in padded base64");
  }
  if (!secret) secret = generateWebhookSecret();
  const previous = await adminChange(deps, ctx, "may-end", "partner.set_webhook", req.clientId, async (trx) => {
    const locked = await deps.partners.lockByClientId(trx, req.clientId);
    if (!locked) fail(Reason.NOT_FOUND, "no such partner");
    const before = await deps.outbox.webhookSecrets(trx, req.clientId);
    const next: WebhookSecrets = url ? { current: deps.box.seal(secret), previous: previousSecret(deps, before, secret) } : { current: null, previous: null };
    await deps.outbox.setWebhook(trx, req.clientId, url, next);
    return next.previous;
  });
  return {
    clientId: req.clientId,
    url: url ?? "",
    secret: url ? secret : "",
    previousSecretExpiresAt: previous ? timestampFromDate(previous.until) : undefined,
  };
}

/**
 * What still signs beside `secret`: a replaced secret for WEBHOOK_SECRET_OVERLAP_MS, so queued retries and
 * receivers not yet switched still verify; setting the same secret again keeps the overlap under way.
 */
function previousSecret(deps: Pick<SetWebhookDeps, "box" | "clock">, before: WebhookSecrets, secret: string): WebhookSecrets["previous"] {
  const now = deps.clock();
  const replaced = before.current ? openOrUndefined(deps.box, before.current) : undefined;
  if (before.current && replaced !== undefined && replaced !== secret) {
    return { enc: before.current, until: new Date(now.getTime() + WEBHOOK_SECRET_OVERLAP_MS) };
  }
  return before.previous && before.previous.until > now ? before.previous : null;
}

/** A sealed secret in the clear, or undefined when this key cannot open it (it is then not kept). */
function openOrUndefined(box: Pick<SecretBox, "open">, sealed: string): string | undefined {
  try {
    return box.open(sealed);
  } catch {
    return undefined;
  }
}
