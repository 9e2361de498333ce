import { randomBytes } from "node:crypto";
import { expect } from "chai";
import type { TestStack } from "./stack.js";
import type { TestPartner } from "./partners.js";

/** Creates a user through the admin RPC and optionally gives it consent for a partner. */
export async function createUserFor(stack: TestStack, partner?: TestPartner, scopes?: string[]) {
  const email = `u-${randomBytes(6).toString("hex")}@example.com`;
  const { userId } = await stack.admin.partners.createUser({ email });
  if (partner) await stack.admin.partnerResources.grantConsent({ clientId: partner.clientId, userId, scopes: scopes ? { scopes } : undefined });
  return { userId, email };
}

export interface ApiResponse {
  status: number;
  headers: Headers;
  body: unknown;
  text: string;
}

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

/** Asserts the exact resource envelope and that request_id equals X-Request-Id. */
export function expectError(res: ApiResponse, status: number, code: string) {
  expect(res.status, res.text).to.equal(status);
  const body = res.body as { error: { code: string; message: string; request_id: string } };
  expect(Object.keys(body)).to.deep.equal(["error"]);
  expect(Object.keys(body.error).sort()).to.deep.equal(["code", "message", "request_id"]);
  expect(body.error.code).to.equal(code);
  expect(body.error.request_id).to.equal(res.headers.get("x-request-id"));
  if (status === 401) expect(res.headers.get("www-authenticate")).to.match(/^Bearer/);
  if (status === 429) expect(res.headers.get("retry-after")).to.equal("60");
}
