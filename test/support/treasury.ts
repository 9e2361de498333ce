import { randomUUID } from "node:crypto";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { BindTreasuryRequestSchema } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import type { Db } from "../../core/db/knex.js";
import type { CoreClients } from "../../gateways/core-clients.js";
import type { TestPartner } from "./partners.js";

/**
 * FIXTURE until issue 3 (consent RPCs) is merged: writes a consent row with raw SQL,
 * the state `vaultgate consent grant` will produce. Replace with the consent RPC then.
 */
export async function insertConsentRowFixture(db: Db, partnerId: string, userId: string, scopes: string[]) {
  await db.raw(
    `INSERT INTO consents (partner_id, user_id, scopes, updated_at) VALUES (?, ?, ?, now())
     ON CONFLICT (partner_id, user_id) DO UPDATE SET scopes = EXCLUDED.scopes, updated_at = now()`,
    [partnerId, userId, scopes],
  );
}

/** A fresh user who granted payouts:receive (or `scopes`) to the partner. */
export async function createRecipient(admin: CoreClients, db: Db, partner: TestPartner, scopes = ["payouts:receive"]): Promise<string> {
  const { userId } = await admin.partners.createUser({ email: `r-${randomUUID()}@example.test` });
  await insertConsentRowFixture(db, partner.partnerId, userId, scopes);
  return userId;
}

export async function bindTreasury(
  admin: CoreClients,
  partner: TestPartner,
  options: Partial<MessageInitShape<typeof BindTreasuryRequestSchema>> = {},
) {
  const payerEntityId = options.payerEntityId ?? randomUUID();
  await admin.treasury.bindTreasury({ clientId: partner.clientId, payerEntityId, balanceCents: 1_000_000n, currency: "USD", ...options });
  return payerEntityId;
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
  clientId: string;
  idempotencyKey: string;
  payerEntityId: string;
  items: BatchItemInit[];
}

/** An ExecuteBatch request; ids default to fresh unique values. */
export function batchRequest(
  partner: TestPartner,
  payerEntityId: string,
  items: ItemSpec[],
  idempotencyKey = `key-${randomUUID()}`,
): BatchRequestInit {
  return {
    clientId: partner.clientId,
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
