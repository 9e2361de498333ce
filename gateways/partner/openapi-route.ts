import type { FastifyInstance } from "fastify";
import { partnerOpenApi } from "./openapi.js";

/** GET /openapi.json: public, cacheable; its server is relative, so it names whatever address served it. */
export async function openApiRoute(app: FastifyInstance) {
  const body = JSON.stringify(partnerOpenApi("/api/partner"));
  app.get("/openapi.json", async (_request, reply) => reply.header("cache-control", "public, max-age=300").type("application/json").send(body));
}
