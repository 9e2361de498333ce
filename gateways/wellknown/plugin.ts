import type { FastifyInstance } from "fastify";
import { HealthCheckResponse_ServingStatus as Status } from "../../gen/grpc/health/v1/health_pb.js";
import { withRequestId, type CoreClients } from "../core-clients.js";
import { isOutage } from "../shared/oauth-error.js";

/** Core's named readiness checks (health services `vaultgate.<name>`, core/health.ts). */
const READINESS_CHECKS = ["database", "migrations", "signing_key", "audit", "settlement"] as const;

export interface WellKnownOptions {
  clients: CoreClients;
}

/** JWKS, liveness and readiness. */
export async function wellKnownRoutes(app: FastifyInstance, options: WellKnownOptions) {
  const { grants, health } = options.clients;

  app.setErrorHandler((err, request, reply) => {
    // An outage was logged once, where it was met; anything else is a bug.
    if (!isOutage(err)) request.log.error({ err }, "well-known failure");
    return reply.code(503).send({ error: "unavailable" });
  });

  app.get("/.well-known/agent-jwks.json", async (request, reply) => {
    const { jwksJson } = await grants.getJwks({}, withRequestId(request.id));
    return reply.header("cache-control", "public, max-age=60").type("application/jwk-set+json").send(jwksJson);
  });

  app.get("/healthz", async () => ({ status: "ok" }));

  // Ready when core's overall check passes; otherwise each named check is asked, so the
  // answer says which failed (`failing`: database, migrations, signing_key, audit, settlement, or core).
  app.get("/readyz", async (request, reply) => {
    const res = await health.check({ service: "" }, withRequestId(request.id)).catch((err: unknown) => {
      // A gateway whose core cannot be reached (logged by the call) names that, as a check.
      if (isOutage(err)) return undefined;
      throw err;
    });
    if (!res) return reply.code(503).send({ status: "not_ready", failing: ["core"] });
    if (res.status === Status.SERVING) return reply.code(200).send({ status: "ready" });
    const results = await Promise.all(
      READINESS_CHECKS.map(async (name) => {
        const one = await health.check({ service: `vaultgate.${name}` }, withRequestId(request.id)).catch(() => undefined);
        return { name, ok: one?.status === Status.SERVING };
      }),
    );
    return reply.code(503).send({ status: "not_ready", failing: results.filter((r) => !r.ok).map((r) => r.name) });
  });
}
