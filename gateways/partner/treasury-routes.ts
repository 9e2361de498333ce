import type { FastifyInstance, FastifyRequest } from "fastify";
import { ConnectError, type Client } from "@connectrpc/connect";
import { EdgeRejection, type TreasuryService } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { forRequest, withRequestId } from "../core-clients.js";
import { bearerToken } from "./bearer.js";
import { edgeRejectionOf, framingAudited, lenientBearer } from "./edge-audit.js";
import { installResourceContext, noStore, jsonObjectBody, noQuery, shaped, userShape } from "./resource-context.js";
import { resourceErrorFrom, sendResourceError, type ResourceErrorBody } from "./resource-envelope.js";
import { BATCH_BODY_LIMIT, parseBatchBody, renderBatch, renderPayout, renderTreasury } from "./treasury-wire.js";
import { noteRefusal } from "../request-log.js";

export interface TreasuryRoutesOptions {
  treasury: Client<typeof TreasuryService>;
}

/**
 * The treasury endpoints, with the other partner resources' edge order. A malformed body or an edge
 * refusal is handed to core (`body_problem`, `edge_rejection`) instead of answered here, so it is
 * authenticated and audited like every other rejection (docs/reference/treasury.md).
 */
export async function treasuryRoutes(app: FastifyInstance, options: TreasuryRoutesOptions) {
  const rpc = options.treasury;
  installResourceContext(app, { notFoundHandler: false });
  app.addHook("onSend", noStore);

  app.get("/treasury", { errorHandler: framingAudited(rpc.getTreasury) }, async (request) => {
    // A missing or malformed bearer is 401 here, as on every resource (no audit row: the request
    // proves no partner); a sent token goes to core, which checks every caller in one order.
    const accessToken = bearerToken(request);
    try {
      noQuery(request);
    } catch (edge) {
      // Core checks the caller first and audits the refusal; its refusal of the caller stands,
      // else the edge's own invalid_request, which names the parameter.
      const recorded = await rpc
        .getTreasury({ accessToken, edgeRejection: EdgeRejection.MALFORMED }, withRequestId(request.id, request.clientAddress))
        .catch((err: unknown) => err);
      if (resourceErrorFrom(recorded).code !== "invalid_request") throw recorded;
      throw edge;
    }
    const res = await rpc.getTreasury({ accessToken }, forRequest(request));
    return renderTreasury(res.treasury!);
  });

  // The batch endpoint in its own context: a request it refuses at the edge (body too
  // large, invalid JSON, unreadable, no bearer) is still handed to core, which audits it.
  await app.register(async (payouts) => {
    payouts.setErrorHandler(async (err: unknown, request, reply) => {
      noteRefusal(request, err);
      const e = resourceErrorFrom(err);
      const rejection = err instanceof ConnectError ? undefined : edgeRejectionOf(e);
      const answer = rejection === undefined ? e : await recordEdgeRejection(rpc, request, rejection, e);
      if (answer.status >= 500 && answer.code !== "temporarily_unavailable") request.log.error({ err }, "partner resource failure");
      return sendResourceError(request, reply, answer);
    });

    payouts.post("/treasury/payouts", { bodyLimit: BATCH_BODY_LIMIT }, async (request, reply) => {
      const accessToken = bearerToken(request);
      const idempotencyKey = idempotencyKeyOf(request);
      // A query parameter, a body that is not a JSON object or has the wrong shape: core
      // authenticates the caller, audits the rejection and answers invalid_request.
      let parsed: ReturnType<typeof parseBatchBody>;
      try {
        noQuery(request);
        parsed = parseBatchBody(jsonObjectBody(request));
      } catch (err) {
        parsed = { ok: false, message: (err as Error).message };
      }
      const res = await rpc.executeBatch(
        parsed.ok
          ? { accessToken, idempotencyKey, payerEntityId: parsed.payerEntityId, items: parsed.items }
          : { accessToken, idempotencyKey, bodyProblem: parsed.message },
        // A refused body is recorded even if its client has left, like every edge refusal.
        parsed.ok ? forRequest(request) : withRequestId(request.id, request.clientAddress),
      );
      if (res.replayed) reply.header("idempotent-replayed", "true");
      return renderBatch(res.batch!);
    });
  });

  app.get<{ Params: { id: string; payoutId: string } }>("/users/:id/payouts/:payoutId", { errorHandler: framingAudited(rpc.getPayout) }, async (request) => {
    const accessToken = bearerToken(request);
    // As on the other user resources: core checks the caller first, then refuses the shape.
    const shape = userShape(request);
    const res = await shaped(
      shape,
      rpc.getPayout(
        { accessToken, userId: shape.value ?? "", payoutId: shape.problem ? "" : request.params.payoutId, requestProblem: shape.problem },
        forRequest(request),
      ),
    );
    return renderPayout(res.payout!);
  });
}

/**
 * Node joins a repeated header with ", ", which core's key rule (visible ASCII, no
 * spaces) refuses; an array is not one key either.
 */
function idempotencyKeyOf(request: FastifyRequest): string {
  const key = request.headers["idempotency-key"];
  return typeof key === "string" ? key : "";
}

/**
 * Hands an edge rejection to core to audit; the gateway's answer stands unless the record could
 * not be written (503 audit_unavailable) or core was unreachable (nothing proves the audit: 5xx).
 */
async function recordEdgeRejection(
  rpc: Client<typeof TreasuryService>,
  request: FastifyRequest,
  edgeRejection: EdgeRejection,
  edge: ResourceErrorBody,
): Promise<ResourceErrorBody> {
  try {
    await rpc.executeBatch(
      { accessToken: lenientBearer(request), idempotencyKey: idempotencyKeyOf(request), edgeRejection },
      withRequestId(request.id, request.clientAddress),
    );
  } catch (err) {
    const answer = resourceErrorFrom(err);
    return answer.status >= 500 ? answer : edge;
  }
  return edge;
}
