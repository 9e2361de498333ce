import type { FastifyInstance, FastifyRequest } from "fastify";
import type { Client } from "@connectrpc/connect";
import type { TreasuryService } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { withRequestId } from "../core-clients.js";
import { bearerToken } from "./bearer.js";
import { installResourceContext, noStore, jsonObjectBody } from "./resource-context.js";
import { invalidRequest } from "./resource-envelope.js";
import { BATCH_BODY_LIMIT, parseBatchBody, renderBatch, renderPayout, renderTreasury } from "./treasury-wire.js";
import { UUID } from "../shared/uuid.js";

export interface TreasuryRoutesOptions {
  treasury: Client<typeof TreasuryService>;
}

/**
 * The treasury endpoints of DESIGN 4.3 in the resource envelope (spec 7.3, 7.4). Edge
 * order as the other partner resources: body size and JSON (413, invalid_json), bearer
 * (401); then core authenticates and runs DESIGN 4.4's checks. A body whose shape is
 * wrong (unknown field, wrong type) is passed to core as `body_problem`, so the
 * rejection is authenticated and audited like every other validation failure (spec 4.8).
 */
export async function treasuryRoutes(app: FastifyInstance, options: TreasuryRoutesOptions) {
  const rpc = options.treasury;
  installResourceContext(app, { notFoundHandler: false });
  app.addHook("onSend", noStore);

  app.get("/treasury", async (request) => {
    const accessToken = bearerToken(request);
    noQuery(request);
    const res = await rpc.getTreasury({ accessToken }, withRequestId(request.id));
    return renderTreasury(res.treasury!);
  });

  app.post("/treasury/payouts", { bodyLimit: BATCH_BODY_LIMIT }, async (request, reply) => {
    const accessToken = bearerToken(request);
    noQuery(request);
    const key = request.headers["idempotency-key"];
    // Node joins a repeated header with ", ", which core's key rule (visible ASCII, no
    // spaces) refuses; an array is not one key either.
    const idempotencyKey = typeof key === "string" ? key : "";
    let parsed: ReturnType<typeof parseBatchBody>;
    try {
      parsed = parseBatchBody(jsonObjectBody(request));
    } catch (err) {
      parsed = { ok: false, message: (err as Error).message };
    }
    const res = await rpc.executeBatch(
      parsed.ok
        ? { accessToken, idempotencyKey, payerEntityId: parsed.payerEntityId, items: parsed.items }
        : { accessToken, idempotencyKey, bodyProblem: parsed.message },
      withRequestId(request.id),
    );
    if (res.replayed) reply.header("idempotent-replayed", "true");
    return renderBatch(res.batch!);
  });

  app.get<{ Params: { id: string; payoutId: string } }>("/users/:id/payouts/:payoutId", async (request) => {
    const accessToken = bearerToken(request);
    if (!UUID.test(request.params.id)) throw invalidRequest("user id must be a UUID");
    noQuery(request);
    const res = await rpc.getPayout({ accessToken, userId: request.params.id.toLowerCase(), payoutId: request.params.payoutId }, withRequestId(request.id));
    return renderPayout(res.payout!);
  });
}

function noQuery(request: FastifyRequest) {
  const keys = Object.keys((request.query ?? {}) as Record<string, unknown>);
  if (keys.length > 0) throw invalidRequest(`unknown query parameter: ${keys[0]}`);
}
