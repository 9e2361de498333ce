import type { FastifyInstance } from "fastify";
import { HealthCheckResponse_ServingStatus as Status } from "../../gen/grpc/health/v1/health_pb.js";
import { withRequestId, type CoreClients } from "../core-clients.js";

export interface WellKnownOptions {
  clients: CoreClients;
}

/** JWKS, liveness and readiness. */
export async function wellKnownRoutes(app: FastifyInstance, options: WellKnownOptions) {
  const { grants, health } = options.clients;

  app.setErrorHandler((err, request, reply) => {
    request.log.error({ err }, "well-known failure");
    return reply.code(503).send({ error: "unavailable" });
  });

  app.get("/.well-known/agent-jwks.json", async (request, reply) => {
    const { jwksJson } = await grants.getJwks({}, withRequestId(request.id));
    return reply.header("cache-control", "public, max-age=60").type("application/jwk-set+json").send(jwksJson);
  });

  app.get("/healthz", async () => ({ status: "ok" }));

  app.get("/readyz", async (request, reply) => {
    const res = await health.check({ service: "" }, withRequestId(request.id));
    const ready = res.status === Status.SERVING;
    return reply.code(ready ? 200 : 503).send({ status: ready ? "ready" : "not_ready" });
  });
}
