import type { FastifyInstance, FastifyRequest } from "fastify";
import type { Client } from "@connectrpc/connect";
import type { PartnerResourcesService } from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { forRequest } from "../core-clients.js";
import { bearerToken } from "./bearer.js";
import {
  checkShape,
  installResourceContext,
  noStore,
  jsonObjectBody,
  noQuery,
  onlyFields,
  paramsAreText,
  shaped,
  userIdParam,
  userShape,
} from "./resource-context.js";
import { invalidRequest } from "./resource-envelope.js";
import { framingAudited } from "./edge-audit.js";
import { codePointLength } from "../shared/text.js";

export interface ResourceRoutesOptions {
  resources: Client<typeof PartnerResourcesService>;
}

/** Pre-create body limit. */
const PRE_CREATE_BODY_LIMIT = 4096;
/** A link request is as small as a pre-create. */
const LINK_BODY_LIMIT = 4096;

type Params = { id: string };

/**
 * The consent-gated partner resources. Checks run in the order docs/reference/partner-api.md
 * documents: body and JSON, bearer present, then core's access checks, the request's shape
 * (checked here, refused and audited by core as `request_problem`) and the rest.
 */
export async function resourceRoutes(app: FastifyInstance, options: ResourceRoutesOptions) {
  const rpc = options.resources;
  installResourceContext(app);
  app.addHook("onSend", noStore);

  // A framing refusal (size, JSON, content coding) of a caller whose bearer core accepts is audited
  // under the route's action, as on the treasury batch; a read's only one is a compressed body (415).
  app.post("/users", { bodyLimit: PRE_CREATE_BODY_LIMIT, errorHandler: framingAudited(rpc.preCreateUser) }, async (request, reply) => {
    const accessToken = bearerToken(request);
    const shape = checkShape(() => {
      noQuery(request);
      const body = jsonObjectBody(request);
      onlyFields(body, ["email"]);
      return stringField(body, "email", 3, 254, true)!;
    });
    const email = shape.value ?? "";
    const res = await shaped(shape, rpc.preCreateUser({ accessToken, email, requestProblem: shape.problem }, forRequest(request)));
    return reply.code(res.created ? 201 : 200).send({ user_id: res.userId, created: res.created });
  });

  app.get<{ Params: Params }>("/users/:id/kyc", { errorHandler: framingAudited(rpc.getKycStatus) }, async (request) => {
    const accessToken = bearerToken(request);
    const shape = userShape(request);
    const userId = shape.value ?? "";
    const res = await shaped(shape, rpc.getKycStatus({ accessToken, userId, requestProblem: shape.problem }, forRequest(request)));
    return { user_id: res.userId, status: res.status, provider: res.provider || null, updated_at: res.updatedAt };
  });

  app.post<{ Params: Params }>(
    "/users/:id/kyc/link",
    { bodyLimit: LINK_BODY_LIMIT, errorHandler: framingAudited(rpc.createKycLink) },
    async (request, reply) => {
      const accessToken = bearerToken(request);
      const shape = checkShape(() => {
        const userId = userIdParam(request);
        noQuery(request);
        const body = jsonObjectBody(request, true);
        onlyFields(body, ["provider", "redirect_uri"]);
        return { userId, provider: stringField(body, "provider", 1, 64, false) ?? "", redirectUri: stringField(body, "redirect_uri", 1, 2048, false) ?? "" };
      });
      const link = shape.value ?? { userId: "", provider: "", redirectUri: "" };
      const res = await shaped(shape, rpc.createKycLink({ accessToken, ...link, requestProblem: shape.problem }, forRequest(request)));
      return reply.code(201).send({ url: res.url, provider: res.provider, expires_at: res.expiresAt });
    },
  );

  app.get<{ Params: Params }>("/users/:id/wallets", { errorHandler: framingAudited(rpc.listWallets) }, async (request) => {
    const accessToken = bearerToken(request);
    const shape = userShape(request);
    const userId = shape.value ?? "";
    const res = await shaped(shape, rpc.listWallets({ accessToken, userId, requestProblem: shape.problem }, forRequest(request)));
    return { user_id: res.userId, wallets: res.wallets.map((w) => ({ chain: w.chain, address: w.address })) };
  });

  app.get<{ Params: Params }>("/users/:id/us-account", { errorHandler: framingAudited(rpc.getUsAccount) }, async (request) => {
    const accessToken = bearerToken(request);
    const shape = userShape(request);
    const userId = shape.value ?? "";
    const r = await shaped(shape, rpc.getUsAccount({ accessToken, userId, requestProblem: shape.problem }, forRequest(request)));
    const v = (s: string) => s || null;
    return {
      user_id: r.userId,
      status: r.status,
      bank_name: v(r.bankName),
      routing_number: v(r.routingNumber),
      account_number: v(r.accountNumber),
      account_type: v(r.accountType),
      beneficiary_name: v(r.beneficiaryName),
    };
  });

  app.get<{ Params: Params }>("/users/:id/transfers", { errorHandler: framingAudited(rpc.listTransfers) }, async (request) => {
    const accessToken = bearerToken(request);
    const shape = checkShape(() => ({ userId: userIdParam(request), page: pageQuery(request) }));
    const { userId, page } = shape.value ?? { userId: "", page: undefined };
    const res = await shaped(shape, rpc.listTransfers({ accessToken, userId, page, requestProblem: shape.problem }, forRequest(request)));
    return {
      data: res.data.map((t) => ({
        transfer_id: t.transferId,
        direction: t.direction,
        amount_cents: Number(t.amountCents),
        currency: t.currency,
        status: t.status,
        created_at: t.createdAt,
        updated_at: t.updatedAt,
      })),
      next_cursor: res.nextCursor || null,
      watermark: res.watermark,
    };
  });

  app.get("/events", { errorHandler: framingAudited(rpc.listEvents) }, async (request) => {
    const accessToken = bearerToken(request);
    const shape = checkShape(() => pageQuery(request));
    const res = await shaped(shape, rpc.listEvents({ accessToken, page: shape.value, requestProblem: shape.problem }, forRequest(request)));
    return {
      data: res.data.map((e) => ({ event_id: e.eventId, type: e.type, created_at: e.createdAt, data: JSON.parse(e.dataJson) as unknown })),
      next_cursor: res.nextCursor || null,
      watermark: res.watermark,
    };
  });
}

function queryOf(request: FastifyRequest): Record<string, unknown> {
  return (request.query ?? {}) as Record<string, unknown>;
}

/** limit (1-100), cursor, since: each at most once; nothing else. */
function pageQuery(request: FastifyRequest) {
  paramsAreText(request);
  const q = queryOf(request);
  for (const [k, v] of Object.entries(q)) {
    if (!["limit", "cursor", "since"].includes(k)) throw invalidRequest(`unknown query parameter: ${k}`);
    if (typeof v !== "string") throw invalidRequest(`repeated query parameter: ${k}`);
  }
  const limitText = q.limit as string | undefined;
  let limit = 0;
  // An empty value is an omitted one, as for cursor and since (`?limit=${n ?? ""}`).
  if (limitText !== undefined && limitText !== "") {
    if (!/^\d{1,3}$/.test(limitText) || Number(limitText) < 1 || Number(limitText) > 100) throw invalidRequest("limit must be an integer from 1 to 100");
    limit = Number(limitText);
  }
  const cursor = (q.cursor as string | undefined) ?? "";
  const since = (q.since as string | undefined) ?? "";
  if (cursor.length > 1024 || since.length > 1024) throw invalidRequest("cursor and since are at most 1024 characters");
  return { limit, cursor, since };
}

function stringField(body: Record<string, unknown>, name: string, min: number, max: number, required: boolean): string | undefined {
  const v = body[name];
  if (v === undefined) {
    if (required) throw invalidRequest(`${name} is required`);
    return undefined;
  }
  if (typeof v !== "string" || codePointLength(v) < min || codePointLength(v) > max)
    throw invalidRequest(`${name} must be a string of ${min} to ${max} characters`);
  return v;
}
