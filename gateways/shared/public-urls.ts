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
