import type { FastifyInstance } from "fastify";
import { partnerOpenApi } from "./openapi.js";

export interface OpenApiRouteOptions {
  /** The partner API's public base (`{base_url}/api/partner`). */
  serverUrl: string;
}

/** GET /openapi.json: public, cacheable. */
export async function openApiRoute(app: FastifyInstance, options: OpenApiRouteOptions) {
  const body = JSON.stringify(partnerOpenApi(options.serverUrl));
  app.get("/openapi.json", async (_request, reply) => reply.header("cache-control", "public, max-age=300").type("application/json").send(body));
}
