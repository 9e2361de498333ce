import { randomUUID } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { BindTreasuryRequestSchema } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import type { CoreClients } from "../../gateways/core-clients.js";
import { createPartner, mintPartnerToken, type TestPartner } from "./partners.js";
import { createUserFor } from "./resources.js";
import type { TestStack } from "./stack.js";

/** A partner with an access token minted through core (no HTTP). */
export interface TreasuryPartner extends TestPartner {
  token: string;
}

/** Mints a token for the partner through the IssueToken RPC (an omitted scope means every entitlement). */
export async function withToken(clients: CoreClients, partner: TestPartner, scope?: string): Promise<TreasuryPartner> {
  const res = await clients.partners.issueToken({ clientId: partner.clientId, clientSecret: partner.clientSecret, scope });
  return { ...partner, token: res.accessToken };
}

/** The user grants (adds) consent scopes to the partner, as `vaultgate consent grant` does. */
export async function grantConsent(admin: CoreClients, partner: TestPartner, userId: string, scopes = ["payouts:receive"]) {
  await admin.partnerResources.grantConsent({ clientId: partner.clientId, userId, scopes: { scopes } });
}

/** Revokes every consent scope; the user stays known to the partner. */
export async function revokeConsent(admin: CoreClients, partner: TestPartner, userId: string) {
  await admin.partnerResources.revokeConsent({ clientId: partner.clientId, userId });
}

/** A fresh user who granted payouts:receive (or `scopes`) to the partner. */
export async function createRecipient(admin: CoreClients, partner: TestPartner, scopes = ["payouts:receive"]): Promise<string> {
  const { userId } = await admin.partners.createUser({ email: `r-${randomUUID()}@example.test` });
  await grantConsent(admin, partner, userId, scopes);
  return userId;
}

export async function bindTreasury(admin: CoreClients, partner: TestPartner, options: Partial<MessageInitShape<typeof BindTreasuryRequestSchema>> = {}) {
  const payerEntityId = options.payerEntityId ?? randomUUID();
  await admin.treasury.bindTreasury({ clientId: partner.clientId, payerEntityId, balanceCents: 1_000_000n, currency: "USD", ...options });
  return payerEntityId;
}

/**
 * A partner paying over HTTP: `treasury:write` and `payouts:receive` (plus `scopes`) entitled, a
 * bound treasury, one payee consenting to the same scopes, and a token minted at the token endpoint.
 */
export async function partnerWithPayee(stack: TestStack, options: { balanceCents?: bigint; scopes?: string[]; webhookUrl?: string } = {}) {
  const scopes = [...(options.scopes ?? []), "payouts:receive"];
  const partner = await createPartner(stack, { entitlements: [...scopes, "treasury:write"], webhookUrl: options.webhookUrl });
  const payer = await bindTreasury(stack.admin, partner, { balanceCents: options.balanceCents ?? 1000n });
  const { userId } = await createUserFor(stack, partner, scopes);
  return { partner, payer, userId, token: await mintPartnerToken(stack, partner) };
}

export interface ItemSpec {
  executionId?: string;
  payoutId?: string;
  recipientUserId: string;
  amountCents?: bigint;
  currency?: string;
  reference?: string;
}

export interface BatchItemInit {
  executionId: string;
  payoutId: string;
  recipientUserId: string;
  amountCents: bigint;
  currency: string;
  reference: string;
}

/** A plain ExecuteBatch request (assignable to the RPC's init shape), easy to copy and change. */
export interface BatchRequestInit {
  accessToken: string;
  idempotencyKey: string;
  payerEntityId: string;
  items: BatchItemInit[];
}

/** An ExecuteBatch request; ids default to fresh unique values. */
export function batchRequest(partner: { token: string }, payerEntityId: string, items: ItemSpec[], idempotencyKey = `key-${randomUUID()}`): BatchRequestInit {
  return {
    accessToken: partner.token,
    idempotencyKey,
    payerEntityId,
    items: items.map((i) => ({
      executionId: i.executionId ?? `ex-${randomUUID()}`,
      payoutId: i.payoutId ?? `po-${randomUUID()}`,
      recipientUserId: i.recipientUserId,
      amountCents: i.amountCents ?? 100n,
      currency: i.currency ?? "USD",
      reference: i.reference ?? "invoice 1",
    })),
  };
}

/** A treasury suite's reads and a fresh paying partner; `stack` is read at call time (a before hook starts it). */
export function treasuryKit(stack: () => TestStack) {
  const treasury = () => stack().clients.treasury;
  const balanceOf = async (p: TreasuryPartner) => Number((await treasury().getTreasury({ accessToken: p.token })).treasury!.availableCents);
  const executionCount = async (p: TestPartner) => {
    const { rows } = await stack().core.db.raw(`SELECT count(*)::int AS n FROM treasury_executions WHERE partner_id = ?`, [p.partnerId]);
    return (rows as { n: number }[])[0]!.n;
  };
  const auditOf = async (p: TestPartner) =>
    (await stack().admin.audit.listRecords({ actor: `partner:${p.clientId}`, action: "treasury.batch.execute", limit: 500 })).records;
  async function setup(bind: Parameters<typeof bindTreasury>[2] = {}) {
    const partner = await withToken(stack().clients, await createPartner(stack(), { entitlements: ["payouts:receive", "treasury:write"] }));
    const payer = await bindTreasury(stack().admin, partner, bind);
    const user = await createRecipient(stack().admin, partner);
    return { partner, payer, user };
  }
  return { treasury, balanceOf, executionCount, auditOf, setup };
}
