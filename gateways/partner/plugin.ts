import type { FastifyInstance } from "fastify";
import type { CoreClients } from "../core-clients.js";
import { tokenRoute } from "./token-route.js";
import { resourceRoutes } from "./resource-routes.js";
import { openApiRoute } from "./openapi-route.js";
import { treasuryRoutes } from "./treasury-routes.js";

export interface PartnerGatewayOptions {
  clients: CoreClients;
  realm: string;
}

/** The partner REST surface under /api/partner; each envelope in its own encapsulated context. */
export async function partnerGateway(app: FastifyInstance, options: PartnerGatewayOptions) {
  await app.register(tokenRoute, { partners: options.clients.partners, realm: options.realm });
  await app.register(resourceRoutes, { resources: options.clients.partnerResources });
  await app.register(treasuryRoutes, { treasury: options.clients.treasury });
  await app.register(openApiRoute);
}
