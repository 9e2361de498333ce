/**
 * Names core and the gateways must agree on, defined once: a scope or chain added here
 * reaches the rules, the consent page, the tool schemas and the OpenAPI document together.
 */

/** The scopes an agent grant may carry. */
export const AGENT_SCOPES = ["accounts:read", "payments:initiate", "payments:simulate", "audit:stream", "agent:budget:create"] as const;
export type AgentScope = (typeof AGENT_SCOPES)[number];

/** Agent scopes whose approval needs a fresh step-up: they move money or create spending power. */
export const STEP_UP_SCOPES: readonly AgentScope[] = ["payments:initiate", "agent:budget:create"];

/** Any one of these reads a payment (payments.get): the agent that pays, or one that reads the accounts. */
export const PAYMENT_READ_SCOPES = ["accounts:read", "payments:initiate"] as const satisfies readonly AgentScope[];

/** The partner scopes a user consents to; also a partner client's default entitlements. */
export const CONSENT_SCOPES = ["kyc:read", "wallet:read", "us_account:read", "transfers:read", "payouts:receive"] as const;
export type ConsentScope = (typeof CONSENT_SCOPES)[number];

/** Token-only partner scope an administrator may add; never a consent. */
export const TREASURY_SCOPE = "treasury:write";

export const PARTNER_SCOPES: readonly string[] = [...CONSENT_SCOPES, TREASURY_SCOPE];

/** A currency's shape as the books hold it (the ledger's CHECK says the same); schemas publish this pattern. */
export const CURRENCY_PATTERN = "^[A-Z]{3}$";
/** ISO 4217 codes in use, from the runtime's ICU data: a made-up code such as XYZ names no money. */
const CURRENCIES: ReadonlySet<string> = new Set(Intl.supportedValuesOf("currency"));
export const isCurrencyCode = (value: string): boolean => CURRENCIES.has(value);

/** A partner-chosen id (`execution_id`, `payout_id`): URL-safe, so it can sit in a path segment. */
export const MAX_PARTNER_ID = 128;
export const PARTNER_ID_RULE = `must be 1 to ${MAX_PARTNER_ID} characters of A-Z a-z 0-9 . _ : ~ -`;
const PARTNER_ID = /^[A-Za-z0-9._:~-]+$/;
export const isPartnerId = (value: string): boolean => value.length > 0 && value.length <= MAX_PARTNER_ID && PARTNER_ID.test(value);

/** A user's account status, as the operator sets it. */
export const USER_STATUSES = ["active", "inactive"] as const;

/** A user's verification status, as partners read it and the operator (or a provider) sets it. */
export const KYC_STATUSES = ["not_started", "pending", "approved", "rejected"] as const;

/** The chains a budget may allow and a wallet may be on. */
export const CHAINS = ["eth", "base", "arb", "op", "polygon", "sol"] as const;
export type Chain = (typeof CHAINS)[number];

/** The MCP tool categories; each MCP endpoint serves the tools of one. */
export const MCP_CATEGORIES = ["read", "write", "treasury"] as const;
export type McpCategory = (typeof MCP_CATEGORIES)[number];

/**
 * The scopes each category's tools need (least privilege): what its endpoints' 401 challenge
 * and protected-resource document name, so a client asks for no more. A test checks this
 * against the tools' own scopes.
 */
export const MCP_CATEGORY_SCOPES: Readonly<Record<McpCategory, readonly AgentScope[]>> = {
  read: ["accounts:read", "audit:stream"],
  write: ["payments:initiate", "payments:simulate"],
  treasury: ["agent:budget:create"],
};

/**
 * The MCP endpoints under `{mcp_url}` and the category each serves: the routes, their
 * protected-resource metadata, and the `resource` values a token may be issued for.
 * `/write` is the write category's second address.
 */
export const MCP_ENDPOINTS: readonly { path: string; category: McpCategory }[] = [
  { path: "/mcp/read", category: "read" },
  { path: "/mcp/write", category: "write" },
  { path: "/mcp/treasury", category: "treasury" },
  { path: "/write", category: "write" },
];

/** How long a browser stays known after a sign-in in it (its own code sign-in budget; core/identity/devices.ts). */
export const KNOWN_BROWSER_SECONDS = 180 * 86_400;
