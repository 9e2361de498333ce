import { randomBytes } from "node:crypto";
import type { TestStack } from "./stack.js";
import type { TestPartner } from "./partners.js";

/** Creates a user through the admin RPC and optionally gives it consent for a partner. */
export async function createUserFor(stack: TestStack, partner?: TestPartner, scopes?: string[]) {
  const email = `u-${randomBytes(6).toString("hex")}@example.com`;
  const { userId } = await stack.admin.partners.createUser({ email });
  if (partner) await stack.admin.partnerResources.grantConsent({ clientId: partner.clientId, userId, scopes: scopes ? { scopes } : undefined });
  return { userId, email };
}

import type { HttpResponse as ApiResponse } from "./refusals.js";

export type { ApiResponse };

/** Calls the partner API with a bearer token. */
export async function api(
  stack: TestStack,
  method: string,
  path: string,
  options: { token?: string; json?: unknown; rawBody?: string; headers?: Record<string, string> } = {},
): Promise<ApiResponse> {
  const headers: Record<string, string> = { ...options.headers };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  let body: string | undefined = options.rawBody;
  if (options.json !== undefined) body = JSON.stringify(options.json);
  if (body !== undefined && !headers["content-type"]) headers["content-type"] = "application/json";
  const res = await fetch(`${stack.url}/api/partner${path}`, { method, headers, body });
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  return { status: res.status, headers: res.headers, body: parsed, text };
}

/** The audit rows of one partner request (by its x-request-id), as [actor, action, outcome, reason, subject]. */
export async function auditRowsOf(stack: TestStack, res: ApiResponse): Promise<string[][]> {
  const rows = await stack.core.db("audit_records").where({ request_id: res.headers.get("x-request-id")! });
  return rows.map((r) => [r.actor, r.action, r.outcome, r.reason, r.subject]);
}
