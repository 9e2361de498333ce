import { randomBytes, randomUUID } from "node:crypto";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { AGENT_TOKEN_HEADER, agentTokenClaims } from "../../core/grants/access-token.js";
import { AGENT_SCOPES } from "../../lib/vocabulary.js";
import type { TestStack } from "./stack.js";
import { afterSendGap, createUser } from "./agent-oauth.js";
import { postRpc } from "./mcp.js";

export const ALL_AGENT_SCOPES: string[] = [...AGENT_SCOPES];

export interface TestOwner {
  userId: string;
  vaultId: string;
  agentPrincipalId: string;
}

/**
 * A fresh user with its root vault (admin RPC) and an agent principal on it. The
 * principal row stands in for what an OAuth client's grant carries; no RPC
 * creates a bare principal, so it is written directly.
 */
export async function createOwner(stack: TestStack): Promise<TestOwner> {
  const email = `u-${randomBytes(6).toString("hex")}@example.test`;
  const user = await stack.admin.partners.createUser({ email });
  const agentPrincipalId = randomUUID();
  await stack.core.db.raw(`INSERT INTO agent_principals (id, user_id, vault_id, display_name, created_at) VALUES (?, ?, ?, 'test agent', ?)`, [
    agentPrincipalId,
    user.userId,
    user.vaultId,
    stack.clock(),
  ]);
  return { userId: user.userId, vaultId: user.vaultId, agentPrincipalId };
}

/**
 * A real grant for a chosen agent principal and its access token signed by core's key. The row is
 * written directly because no RPC issues a grant for a chosen principal; core verifies it normally.
 */
export async function grantFor(
  stack: TestStack,
  owner: { userId: string; vaultId: string; agentPrincipalId: string },
  options: { scopes?: string[]; stepUp?: boolean; authTime?: Date } = {},
): Promise<string> {
  const stepUp = options.stepUp ?? false;
  const id = randomUUID();
  const now = stack.clock();
  const authTime = stepUp ? (options.authTime ?? now) : null;
  const scopes = options.scopes ?? ALL_AGENT_SCOPES;
  await stack.core.db("grants").insert({
    id,
    lineage_id: id,
    user_id: owner.userId,
    agent_principal_id: owner.agentPrincipalId,
    vault_id: owner.vaultId,
    scopes,
    state: "active",
    step_up: stepUp,
    auth_time: authTime,
    issued_at: now,
    expires_at: new Date(now.getTime() + 3600_000),
    state_changed_at: now,
  });
  const claims = agentTokenClaims({
    issuer: stack.issuer,
    mcpUrl: stack.mcpUrl,
    vaultUrn: `urn:vaultgate:vault:${owner.vaultId}`,
    userId: owner.userId,
    clientId: "operator",
    agentId: owner.agentPrincipalId,
    vaultId: owner.vaultId,
    scopes,
    grantId: id,
    issuedAt: now,
    authTime,
  });
  return stack.core.keyring.signJwt(AGENT_TOKEN_HEADER, claims as unknown as Record<string, unknown>);
}

/** Revokes the grant behind an access token, as the dashboard would (state only). */
export async function revokeGrant(stack: TestStack, accessToken: string): Promise<void> {
  const { jti } = JSON.parse(Buffer.from(accessToken.split(".")[1]!, "base64url").toString("utf8")) as { jti: string };
  await stack.core.db("grants").where({ id: jti }).update({ state: "revoked", state_changed_at: stack.clock(), state_reason: "user_revocation" });
}

export function budgetParams(overrides: Record<string, unknown> = {}) {
  return {
    purpose: "trip",
    displayName: "Trip to Lisbon",
    amountCapCentsPerTx: 10_000n,
    amountCapCentsPerDay: 20_000n,
    amountCapCentsLifetime: 50_000n,
    stepUpAmountCents: 5_000n,
    chainAllowlist: ["base", "eth"],
    idempotencyKey: `key-${randomBytes(8).toString("hex")}`,
    ...overrides,
  };
}

export function futureTimestamp(stack: TestStack, ms: number) {
  return timestampFromDate(new Date(stack.clock().getTime() + ms));
}

export function payment(overrides: { amountCents?: bigint; chain?: string; currency?: string; idempotencyKey?: string; address?: string } = {}) {
  return {
    counterparty: { address: overrides.address ?? "0xabc0000000000000000000000000000000000001", chain: overrides.chain ?? "base", token: "USDC" },
    amountCents: overrides.amountCents ?? 1_000n,
    currency: overrides.currency ?? "USD",
    idempotencyKey: overrides.idempotencyKey ?? `pay-${randomBytes(8).toString("hex")}`,
  };
}

/** A JSON-RPC call to the stack's gateway with a bearer token. */
export function stackRpc(stack: TestStack) {
  return (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
}

/**
 * Over JSON-RPC as an owner would: `owner` (a fresh one by default) makes a child budget with
 * `budget`'s fields, the operator funds it with `fundCents`, and an agent token is issued on it.
 */
export async function fundedChildBudget(
  stack: TestStack,
  opts: { fundCents: bigint; budget: Record<string, unknown>; owner?: { userId: string; vaultId: string } },
) {
  const owner = opts.owner ?? (await createOwner(stack));
  const ownerToken = (await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true })).token!
    .accessToken;
  const created = await stackRpc(stack)("/mcp/treasury", ownerToken, "agent.budget.create", {
    purpose: "trip",
    idempotency_key: `b-${randomBytes(6).toString("hex")}`,
    ...opts.budget,
  });
  const vaultId = created.json!.result.vault_id as string;
  await stack.admin.budgets.fundVault({ vaultId, amountCents: opts.fundCents });
  const agentToken = (await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId, scopes: ALL_AGENT_SCOPES })).token!.accessToken;
  return { ownerToken, vaultId, agentToken };
}

/**
 * Over JSON-RPC as an owner and agent would: a funded child budget and a payment of `amountCents`
 * waiting for the owner's approval, for suites that approve or decline it in the pages.
 */
export async function pendingPayment(stack: TestStack, opts: { key: string; amountCents: number; address: string; budget?: Record<string, unknown> }) {
  const rpc = stackRpc(stack);
  const user = await createUser(stack);
  const { agentToken: agent } = await fundedChildBudget(stack, {
    owner: user,
    fundCents: 50_000n,
    budget: { display_name: "Trip budget", step_up_amount_cents: 5_000, chain_allowlist: ["base"], idempotency_key: `${opts.key}-budget`, ...opts.budget },
  });
  const args = {
    counterparty: { address: opts.address, chain: "base", token: "USDC" },
    amount_cents: opts.amountCents,
    currency: "USD",
    idempotency_key: `${opts.key}-payment`,
  };
  const pending = await rpc("/mcp/write", agent, "payments.initiate", args);
  return { rpc, user, agent, args, pending, paymentId: pending.json!.result.payment_id as string };
}

/**
 * A signed-in web session of the user, as the dashboard holds it: sign-in by e-mailed
 * one-time code over the real RPCs, the code read from the dev outbox. With `stepUp`, the
 * session also passes step-up (a second code); `replaces` is the browser's previous session.
 */
export async function ownerSession(stack: TestStack, userId: string, options: { stepUp?: boolean; replaces?: string } = {}): Promise<string> {
  const { email } = await stack.core.db("users").where({ id: userId }).first("email");
  const codeOf = async () => {
    const { messages } = await stack.admin.grants.listOutbox({ email });
    return /(\d{6})/.exec(messages[0]!.subject)![1]!; // newest first
  };
  const started = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ email }));
  const { sessionToken } = await stack.clients.grants.completeSignIn({
    challengeId: started.challengeId,
    code: await codeOf(),
    replacesSessionToken: options.replaces ?? "",
  });
  if (options.stepUp) {
    const challenge = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ sessionToken }));
    await stack.clients.grants.completeSignIn({ challengeId: challenge.challengeId, code: await codeOf(), sessionToken });
  }
  return sessionToken;
}
