import { randomUUID } from "node:crypto";
import { UUID } from "../../lib/uuid.js";
import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Knex } from "knex";
import type { FundBudgetRequest, FundBudgetResponseSchema, FundVaultRequest, FundVaultResponseSchema } from "../../gen/vaultgate/budgets/v1/funds_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { callFacts } from "../context.js";
import { callerTransaction } from "../deadlines.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import { budgetCaller, withBudget, type ActingDeps } from "./caller.js";
import { derivedUuid } from "../../lib/crypto.js";
import { MAX_AMOUNT } from "./policy.js";
import type { BudgetRecord, VaultRecord } from "./records.js";
import type { BudgetsRowStore } from "./stores/budgets.js";
import type { VaultsStore } from "./stores/vaults.js";
import { checkFundInput } from "./validation.js";

export interface FundVaultDeps {
  db: Db;
  budgets: BudgetsRowStore;
  vaults: VaultsStore;
  audit: AuditStore;
  clock: () => Date;
}

export interface FundBudgetDeps extends ActingDeps {
  vaults: VaultsStore;
}

/** BudgetsService.FundVault: the operator credits a vault from outside (ledger kind vault.fund). */
export async function fundVault(deps: FundVaultDeps, req: FundVaultRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof FundVaultResponseSchema>> {
  const { clock } = deps;
  const amountCents = Number(req.amountCents);
  if (!UUID.test(req.vaultId)) fail(Reason.INVALID_REQUEST, "vault_id must be a UUID");
  if (req.amountCents < 1n || req.amountCents > BigInt(MAX_AMOUNT)) fail(Reason.INVALID_REQUEST, `amount_cents must be an integer from 1 to ${MAX_AMOUNT}`);
  const vault = await callerTransaction(deps.db, ctx.signal, "before the vault was funded", async (trx) => {
    // The budget row before the vault (the budgets' lock order): a close, decline or cleanup is seen or waits.
    const status = await deps.budgets.lockStatusOfVault(trx, req.vaultId);
    if (status === "closed" || status === "declined") {
      fail(Reason.ACCESS_DENIED, `the vault belongs to a ${status} budget, where nothing can spend; fund its parent vault`);
    }
    // A saga that does not complete removes its vault, and what it holds with it.
    if (status && status !== "draft" && status !== "active") {
      fail(Reason.ACCESS_DENIED, "the vault belongs to a budget whose creation did not complete; fund it once the budget exists");
    }
    const v = await deps.vaults.findVault(trx, req.vaultId, true);
    if (!v) fail(Reason.NOT_FOUND, "no such vault");
    if (v.balanceCents + amountCents > MAX_AMOUNT) fail(Reason.INVALID_REQUEST, "the balance would exceed 2^53-1 cents");
    const funded = await deps.vaults.fundVault(trx, v, amountCents, { id: randomUUID(), kind: "vault.fund", reference: `vault:${v.id}`, at: clock() });
    await deps.audit.append(trx, {
      ...callFacts(ctx),
      actor: "admin",
      action: "vault.fund",
      outcome: "success",
      subject: v.id,
      at: clock(),
    });
    return funded;
  });
  return { vaultId: vault.id, balanceCents: BigInt(vault.balanceCents), currency: vault.currency };
}

/** BudgetsService.FundBudget: money from a budget's parent vault into the budget, once per idempotency key. */
export async function fundBudget(
  deps: FundBudgetDeps,
  req: FundBudgetRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof FundBudgetResponseSchema>> {
  const caller = await budgetCaller(deps, req.accessToken, req.sessionToken, "funding a budget");
  const amountCents = checkFundInput(req.amountCents, req.idempotencyKey);
  const out = await withBudget(deps, ctx, caller, req.vaultId, "agent.budget.fund", async (trx, { budget: b, actor, agent, now }) => {
    // The key's ledger transaction: the same key on the same budget names the same movement.
    const transferId = derivedUuid("budget.fund", b.vaultId, req.idempotencyKey);
    const current = (await deps.vaults.findVault(trx, b.vaultId))!;
    // A replay answers what the key did, whatever the budget became since.
    const prior = await deps.vaults.findTransfer(trx, transferId, { vaultId: b.vaultId, currency: current.currency });
    if (prior) {
      if (prior.kind !== "budget.fund" || prior.amountCents !== amountCents) fail(Reason.IDEMPOTENCY_CONFLICT, "idempotency_key was used with another amount");
      return { b, transferId, vault: current, replayed: true };
    }
    if (b.status === "closed") fail(Reason.ACCESS_DENIED, "the budget is closed");
    if (b.status === "declined") fail(Reason.ACCESS_DENIED, "the vault owner declined this budget");
    // Money goes into a budget an agent made without a step-up only once its owner looked at it.
    if (b.status === "draft" && agent) fail(Reason.ACCESS_DENIED, "the budget is a draft awaiting its owner's approval: only the owner can fund it");
    const { parent, child } = await lockBudgetVaults(deps, trx, b);
    if (parent.balanceCents < amountCents) fail(Reason.INSUFFICIENT_FUNDS, "the parent vault's balance is below the amount");
    if (child.balanceCents + amountCents > MAX_AMOUNT) fail(Reason.INVALID_REQUEST, "the budget's balance would exceed 2^53-1 cents");
    const moved = await deps.vaults.moveBetweenVaults(trx, parent, child, amountCents, {
      id: transferId,
      kind: "budget.fund",
      reference: `budget:${b.vaultId}`,
      at: now,
    });
    // Impossible while the budget is locked (findTransfer saw no such movement).
    if (!moved.moved) throw new Error(`budget funding ${transferId} was already in the ledger`);
    await deps.audit.append(trx, {
      ...callFacts(ctx),
      actor,
      action: "agent.budget.fund",
      outcome: "success",
      subject: b.vaultId,
      at: now,
    });
    return { b, transferId, vault: moved.to, replayed: false };
  });
  return {
    transferId: out.transferId,
    vaultId: out.b.vaultId,
    parentVaultId: out.b.parentVaultId,
    amountCents: BigInt(amountCents),
    currency: out.vault.currency,
    balanceCents: BigInt(out.vault.balanceCents),
    replayed: out.replayed,
  };
}

/** The budget's vault and its parent, locked (lockVaults' order), both the budget owner's. */
export async function lockBudgetVaults(deps: { vaults: VaultsStore }, trx: Knex.Transaction, b: BudgetRecord) {
  const locked = await deps.vaults.lockVaults(trx, [b.parentVaultId, b.vaultId]);
  const parent = locked.get(b.parentVaultId);
  const child = locked.get(b.vaultId);
  if (!parent || !child || parent.ownerUserId !== b.userId || child.ownerUserId !== b.userId) fail(Reason.NOT_FOUND, "no such budget");
  // A child vault is made in its parent's currency and neither ever changes.
  if (parent.currency !== child.currency) throw new Error(`budget vault ${b.vaultId} is in ${child.currency}, its parent in ${parent.currency}`);
  return { parent, child };
}

/**
 * Moves everything a budget's vault holds back to its parent vault (ledger kind
 * budget.sweep), when it holds anything. `vaults` holds both rows, locked; their balances
 * are updated in it. `why` makes the movement's id: a budget is declined and closed at most once.
 */
export async function sweepInto(
  deps: { vaults: VaultsStore },
  trx: Knex.Transaction,
  b: BudgetRecord,
  vaults: Map<string, VaultRecord>,
  why: "close" | "decline" | "kept",
  at: Date,
): Promise<{ sweptCents: number; transferId: string }> {
  const parent = vaults.get(b.parentVaultId)!;
  const child = vaults.get(b.vaultId)!;
  if (child.balanceCents <= 0) return { sweptCents: 0, transferId: "" };
  if (parent.balanceCents + child.balanceCents > MAX_AMOUNT) fail(Reason.INVALID_REQUEST, "the parent vault's balance would exceed 2^53-1 cents");
  // Kept money can be swept more than once (the operator may credit a closed vault), so
  // each such sweep is a movement of its own; a close or decline happens once.
  const transferId = why === "kept" ? randomUUID() : derivedUuid("budget.sweep", b.vaultId, why);
  const moved = await deps.vaults.moveBetweenVaults(trx, child, parent, child.balanceCents, {
    id: transferId,
    kind: "budget.sweep",
    reference: `budget:${b.vaultId}`,
    at,
  });
  if (!moved.moved) throw new Error(`budget sweep ${transferId} was already in the ledger`);
  vaults.set(parent.id, moved.to);
  vaults.set(child.id, moved.from);
  return { sweptCents: child.balanceCents, transferId };
}
