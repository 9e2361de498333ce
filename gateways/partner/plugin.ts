import type { FastifyInstance } from "fastify";
import type { CoreClients } from "../core-clients.js";
import { tokenRoute } from "./token-route.js";

export interface PartnerGatewayOptions {
  clients: CoreClients;
  realm: string;
}

/** The partner REST surface under /api/partner; each envelope in its own encapsulated context. */
export async function partnerGateway(app: FastifyInstance, options: PartnerGatewayOptions) {
  await app.register(tokenRoute, { partners: options.clients.partners, realm: options.realm });
}
