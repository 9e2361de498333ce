import { PartnerStatus } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import type { TestStack } from "./stack.js";
import { uniqueSlug } from "./stack.js";

export interface TestPartner {
  partnerId: string;
  clientId: string;
  clientSecret: string;
}

/** Creates a partner through the admin RPC, as an operator would. */
export async function createPartner(
  stack: TestStack,
  options: { entitlements?: string[]; status?: "active" | "pending"; webhookUrl?: string; name?: string } = {},
): Promise<TestPartner> {
  const slug = uniqueSlug();
  const res = await stack.admin.partners.createPartner({
    name: options.name ?? `Partner ${slug}`,
    slug,
    entitlements: options.entitlements ? { scopes: options.entitlements } : undefined,
    status: options.status === "pending" ? PartnerStatus.PENDING : PartnerStatus.ACTIVE,
    webhookUrl: options.webhookUrl ?? "",
  });
  return { partnerId: res.partner!.partnerId, clientId: res.partner!.clientId, clientSecret: res.clientSecret };
}

/** POSTs a form to the partner token endpoint. */
export async function postToken(url: string, body: string, headers: Record<string, string> = {}) {
  return fetch(`${url}/api/partner/oauth/token`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
    body,
  });
}

export function basic(clientId: string, clientSecret: string): string {
  const enc = (s: string) => encodeURIComponent(s).replace(/%20/g, "+");
  return `Basic ${Buffer.from(`${enc(clientId)}:${enc(clientSecret)}`).toString("base64")}`;
}

/** Mints a partner token over HTTP and returns the access token. */
export async function mintPartnerToken(stack: TestStack, partner: TestPartner, scope?: string): Promise<string> {
  const form = new URLSearchParams({ grant_type: "client_credentials" });
  if (scope !== undefined) form.set("scope", scope);
  const res = await postToken(stack.url, form.toString(), { authorization: basic(partner.clientId, partner.clientSecret) });
  if (res.status !== 200) throw new Error(`token mint failed: ${res.status} ${await res.text()}`);
  return ((await res.json()) as { access_token: string }).access_token;
}
