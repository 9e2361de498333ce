import { randomUUID } from "node:crypto";
import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Knex } from "knex";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type {
  BindTreasuryRequest,
  BindTreasuryResponseSchema,
  FundTreasuryRequest,
  FundTreasuryResponseSchema,
  SetTreasuryStatusRequest,
  SetTreasuryStatusResponseSchema,
} from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { fail } from "../errors.js";
import { changeTransaction, type ChangeKind } from "../deadlines.js";
import type { PartnerRecord, PartnersStore } from "../partners/store.js";
import { UUID } from "../../lib/uuid.js";
import { appendAudit, type AuditDeps } from "./caller.js";
import type { TreasuryStore } from "./store.js";
import { cents, MAX_CENTS, optionalCents, statusName, toProto } from "./wire.js";
import { isCurrencyCode } from "../../lib/vocabulary.js";

/** What the operator's treasury changes need: BindTreasury, SetTreasuryStatus, FundTreasury. */
export interface AdminDeps extends AuditDeps {
  store: Pick<TreasuryStore, "bind" | "lock" | "setStatus" | "fund">;
  partners: Pick<PartnersStore, "findByClientId">;
}

async function partnerForAdmin(deps: Pick<AdminDeps, "partners">, clientId: string): Promise<PartnerRecord> {
  const partner = clientId ? await deps.partners.findByClientId(clientId) : undefined;
  if (!partner) fail(Reason.NOT_FOUND, "no such partner");
  return partner;
}

/** Runs an admin change in one transaction with its audit row; only a "may-end" one goes on for a caller who left. */
function adminChange<T>(deps: AuditDeps, ctx: HandlerContext, kind: ChangeKind, action: string, subject: string, work: (trx: Knex.Transaction) => Promise<T>) {
  const change = async (trx: Knex.Transaction) => {
    const result = await work(trx);
    await appendAudit(deps, trx, ctx, { actor: "admin", action, subject });
    return result;
  };
  return changeTransaction(deps.db, ctx.signal, kind, `before ${action} began`, change);
}

/** TreasuryService.BindTreasury. */
export async function bindTreasury(
  deps: AdminDeps,
  req: BindTreasuryRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof BindTreasuryResponseSchema>> {
  const partner = await partnerForAdmin(deps, req.clientId);
  if (!UUID.test(req.payerEntityId)) fail(Reason.INVALID_REQUEST, "payer_entity_id must be a UUID");
  const currency = req.currency === "" ? "USD" : req.currency;
  if (!isCurrencyCode(currency)) fail(Reason.INVALID_REQUEST, "currency must be an ISO 4217 code in upper case");
  const limits = {
    balanceCents: cents(req.balanceCents, "balance_cents"),
    capPerItemCents: optionalCents(req.capPerItemCents, "cap_per_item_cents"),
    capPerDayCents: optionalCents(req.capPerDayCents, "cap_per_day_cents"),
    capLifetimeCents: optionalCents(req.capLifetimeCents, "cap_lifetime_cents"),
    stepUpAmountCents: optionalCents(req.stepUpAmountCents, "step_up_amount_cents"),
  };
  const result = await adminChange(deps, ctx, "creates", "treasury.bind", partner.clientId, (trx) =>
    deps.store.bind(
      trx,
      { partnerId: partner.id, payerEntityId: req.payerEntityId.toLowerCase(), currency, ...limits },
      { id: randomUUID(), at: deps.clock() },
    ),
  );
  return { treasury: toProto(partner, result.treasury), created: result.created };
}

/** TreasuryService.SetTreasuryStatus. */
export async function setTreasuryStatus(
  deps: AdminDeps,
  req: SetTreasuryStatusRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof SetTreasuryStatusResponseSchema>> {
  const partner = await partnerForAdmin(deps, req.clientId);
  const status = statusName[req.status];
  if (!status) fail(Reason.INVALID_REQUEST, "status is required");
  // Only an activation grants: a suspension goes on whether or not its caller still waits.
  const kind = status === "active" ? "creates" : "may-end";
  const treasury = await adminChange(deps, ctx, kind, `treasury.set_status.${status}`, partner.clientId, async (trx) => {
    if (!(await deps.store.lock(trx, partner.id))) fail(Reason.TREASURY_NOT_CONFIGURED, "no treasury is bound to this partner");
    return (await deps.store.setStatus(trx, partner.id, status, deps.clock()))!;
  });
  return { treasury: toProto(partner, treasury) };
}

/** TreasuryService.FundTreasury. */
export async function fundTreasury(
  deps: AdminDeps,
  req: FundTreasuryRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof FundTreasuryResponseSchema>> {
  const partner = await partnerForAdmin(deps, req.clientId);
  const amount = cents(req.amountCents, "amount_cents");
  if (amount === 0) fail(Reason.INVALID_REQUEST, "amount_cents must be at least 1");
  const treasury = await adminChange(deps, ctx, "creates", "treasury.fund", partner.clientId, async (trx) => {
    const locked = await deps.store.lock(trx, partner.id);
    if (!locked) fail(Reason.TREASURY_NOT_CONFIGURED, "no treasury is bound to this partner");
    if (locked.balanceCents + amount > MAX_CENTS) fail(Reason.INVALID_REQUEST, `the balance would exceed ${MAX_CENTS} cents`);
    return deps.store.fund(trx, locked, amount, { id: randomUUID(), at: deps.clock() });
  });
  return { treasury: toProto(partner, treasury) };
}
