import type { AgentScope } from "../../lib/vocabulary.js";

/** The four public addresses (BASE_URL, AUTH_URL, APP_URL, MCP_URL) plus the token issuer, as the gateway renders them. */
export interface PublicUrls {
  issuer: string;
  baseUrl: string;
  authUrl: string;
  appUrl: string;
  mcpUrl: string;
}

/** Every agent scope in the words the consent page and metadata use. */
export const AGENT_SCOPE_WORDS: Readonly<Record<string, string>> = {
  "accounts:read": "See the balance of the vault",
  "payments:initiate": "Start payments from the vault, within its spending policy",
  "payments:simulate": "Check whether a payment would be allowed, without moving money",
  "audit:stream": "Read the vault's activity log",
  "agent:budget:create": "Create sub-budgets with their own spending limits",
} satisfies Record<AgentScope, string>;

/** MCP endpoints that have protected-resource metadata. */
export const MCP_PATHS = ["/mcp/read", "/mcp/write", "/mcp/treasury", "/write"];

/**
 * The scopes each MCP endpoint's tools need (least privilege): what its 401 challenge
 * and its protected-resource document name, so a client asks for no more. A test checks
 * this against the tools' own scopes.
 */
export const MCP_ENDPOINT_SCOPES: Readonly<Record<string, readonly AgentScope[]>> = {
  "/mcp/read": ["accounts:read", "audit:stream"],
  "/mcp/write": ["payments:initiate", "payments:simulate"],
  "/write": ["payments:initiate", "payments:simulate"],
  "/mcp/treasury": ["agent:budget:create"],
};
