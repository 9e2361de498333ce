/** Translations between the treasury's wire messages and its records, shared by its handlers. */

import type { MessageInitShape } from "@bufbuild/protobuf";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { TreasuryStatus, type TreasurySchema } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { fail } from "../errors.js";
import type { PartnerRecord } from "../partners/store.js";
import type { CONSENT_SCOPES } from "../../lib/vocabulary.js";
import type { TreasuryRecord, TreasuryStatusName } from "./records.js";

export const PAYOUTS_RECEIVE = "payouts:receive" satisfies (typeof CONSENT_SCOPES)[number];
export const MAX_CENTS = Number.MAX_SAFE_INTEGER;

export const statusName = {
  [TreasuryStatus.UNSPECIFIED]: undefined,
  [TreasuryStatus.ACTIVE]: "active",
  [TreasuryStatus.SUSPENDED]: "suspended",
  [TreasuryStatus.DISABLED]: "disabled",
  [TreasuryStatus.MANDATE_EXPIRED]: "mandate_expired",
} satisfies Record<TreasuryStatus, TreasuryStatusName | undefined>;

const statusEnum = {
  active: TreasuryStatus.ACTIVE,
  suspended: TreasuryStatus.SUSPENDED,
  disabled: TreasuryStatus.DISABLED,
  mandate_expired: TreasuryStatus.MANDATE_EXPIRED,
} satisfies Record<TreasuryStatusName, TreasuryStatus>;

export function cents(value: bigint, field: string): number {
  if (value < 0n || value > BigInt(MAX_CENTS)) fail(Reason.INVALID_REQUEST, `${field} must be an integer from 0 to ${MAX_CENTS}`);
  return Number(value);
}

export function optionalCents(value: bigint | undefined, field: string): number | null {
  return value === undefined ? null : cents(value, field);
}

export function toProto(partner: Pick<PartnerRecord, "clientId">, t: TreasuryRecord): MessageInitShape<typeof TreasurySchema> {
  const big = (v: number | null) => (v === null ? undefined : BigInt(v));
  return {
    clientId: partner.clientId,
    status: statusEnum[t.status],
    payerEntityId: t.payerEntityId,
    currency: t.currency,
    availableCents: BigInt(t.balanceCents),
    capPerItemCents: big(t.capPerItemCents),
    capPerDayCents: big(t.capPerDayCents),
    capLifetimeCents: big(t.capLifetimeCents),
    stepUpAmountCents: big(t.stepUpAmountCents),
  };
}

/** The audit `reason` label of a failure: the snake_case Reason name. */
export function reasonLabel(reason: Reason): string {
  return (Reason[reason] ?? "unspecified").toLowerCase();
}
