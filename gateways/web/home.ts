import type { FastifyInstance } from "fastify";
import { html, page } from "./views/html.js";
import { setPageHeaders } from "./context.js";
import { AGENTS_PATH } from "./paths.js";
import type { PublicUrls } from "../shared/public-urls.js";

/**
 * GET / : where a person (or a program) starts. A browser gets a short page of links;
 * a client asking for JSON gets the same addresses as data.
 */
export async function homeRoute(app: FastifyInstance, options: { urls: PublicUrls }) {
  const { urls } = options;
  const links = {
    dashboard: `${urls.appUrl}${AGENTS_PATH}`,
    mcp_endpoints: [`${urls.mcpUrl}/mcp/read`, `${urls.mcpUrl}/mcp/write`, `${urls.mcpUrl}/mcp/treasury`],
    authorization_server_metadata: `${urls.authUrl}/.well-known/oauth-authorization-server`,
    partner_api: `${urls.baseUrl}/api/partner`,
    openapi: `${urls.baseUrl}/api/partner/openapi.json`,
    jwks: `${urls.baseUrl}/.well-known/agent-jwks.json`,
    health: `${urls.baseUrl}/healthz`,
    readiness: `${urls.baseUrl}/readyz`,
  };
  app.get("/", async (request, reply) => {
    const accept = request.headers.accept ?? "";
    if (/application\/json/.test(accept) && !/text\/html/.test(accept)) {
      return reply.header("cache-control", "no-store").send({ service: "vaultgate", links });
    }
    setPageHeaders(reply);
    const item = (label: string, href: string, note: string) => html`<li><a href="${href}">${label}</a> — ${note}</li>`;
    return reply.type("text/html; charset=utf-8").send(
      page(
        "Vaultgate",
        html`<div class="card">
            <p>Scoped, revocable access for agents and partners to people's accounts.</p>
            <ul>
              ${item("Your agents", links.dashboard, "sign in to see and revoke what agents may do, and approve pending payments")}
              ${item("Partner API", links.openapi, "the OpenAPI document of the partner REST API")}
              ${item("OAuth metadata", links.authorization_server_metadata, "for agent clients")}
            </ul>
            <p>MCP endpoints for agents: ${links.mcp_endpoints.map((u) => html`<code>${u}</code> `)}</p>
          </div>`,
      ),
    );
  });
}
