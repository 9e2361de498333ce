import { randomBytes, randomUUID } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { GrantContextSchema, type GrantContext } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import type { TestStack } from "./stack.js";

export const ALL_AGENT_SCOPES = ["agent:budget:create", "accounts:read", "payments:initiate", "payments:simulate", "audit:stream"];

export interface TestOwner {
  userId: string;
  vaultId: string;
  agentPrincipalId: string;
}

/**
 * A fresh user with its root vault (admin RPC) and an agent principal on it. The
 * principal row stands in for what an OAuth client's grant carries (issue 5); no RPC
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

/** The context VerifyAgentToken would hand over for a grant on `vaultId`. */
export function grantFor(
  stack: TestStack,
  owner: { userId: string; vaultId: string; agentPrincipalId: string },
  options: { scopes?: string[]; stepUp?: boolean; authTime?: Date } = {},
): GrantContext {
  const stepUp = options.stepUp ?? false;
  return create(GrantContextSchema, {
    grantId: randomUUID(),
    userId: owner.userId,
    agentPrincipalId: owner.agentPrincipalId,
    vaultId: owner.vaultId,
    scopes: options.scopes ?? ALL_AGENT_SCOPES,
    stepUp,
    authTime: stepUp ? BigInt(Math.floor((options.authTime ?? stack.clock()).getTime() / 1000)) : 0n,
    clientId: "",
  });
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

/** Awaits a call that must fail and returns its domain detail (code checked by the caller). */
export async function rejection(call: Promise<unknown>) {
  try {
    await call;
  } catch (err) {
    const e = ConnectError.from(err);
    return { code: e.code, detail: e.findDetails(ErrorDetailSchema)[0], message: e.rawMessage };
  }
  throw new Error("expected the call to fail");
}
