/** PartnerResourcesService: a user's wallets, US bank account and transfers (ledger entries). */

import { randomInt, randomUUID } from "node:crypto";
import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type {
  AddWalletRequest,
  AddWalletResponseSchema,
  GetUsAccountRequest,
  GetUsAccountResponseSchema,
  ListTransfersRequest,
  ListTransfersResponseSchema,
  ListWalletsRequest,
  ListWalletsResponseSchema,
  ProvisionUsAccountRequest,
  ProvisionUsAccountResponseSchema,
  RecordLedgerEntryRequest,
  RecordLedgerEntryResponseSchema,
} from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Db } from "../db/knex.js";
import type { UsersStore } from "../identity/users-store.js";
import { CHAINS, isCurrencyCode } from "../../lib/vocabulary.js";
import type { PartnerAccess } from "./access.js";
import { insertTransferEntry, listTransfers as listTransfersOf, type LedgerEntry } from "../ledger/transfers.js";
import type { ResourcesStore } from "./resources-store.js";
import { transferJson, transferOut, usAccountOut } from "./resources-wire.js";
import { adminChange, emit, lockUser, type AdminChangeDeps, type EmitDeps, type LockUserDeps } from "./resources-changes.js";
import { pageOut, position, type PagingDeps } from "./resources-paging.js";

/** What a partner's read of one user resource needs. */
export interface UserReadDeps<K extends keyof ResourcesStore> {
  db: Db;
  access: Pick<PartnerAccess, "authorize">;
  resources: Pick<ResourcesStore, K>;
}

/** What PartnerResourcesService.ListTransfers needs. */
export interface ListTransfersDeps extends PagingDeps {
  db: Db;
  access: Pick<PartnerAccess, "authorize" | "audited" | "refusalsAudited">;
}

/** What PartnerResourcesService.AddWallet needs. */
export interface AddWalletDeps extends AdminChangeDeps, LockUserDeps {
  resources: Pick<ResourcesStore, "addWallet" | "listWallets">;
}

/** What PartnerResourcesService.ProvisionUsAccount needs. */
export interface ProvisionUsAccountDeps extends AdminChangeDeps {
  users: Pick<UsersStore, "lockUser" | "findById">;
  resources: Pick<ResourcesStore, "insertUsAccount" | "getUsAccount">;
}

/** What PartnerResourcesService.RecordLedgerEntry needs. */
export interface RecordLedgerEntryDeps extends AdminChangeDeps, LockUserDeps, EmitDeps {
  resources: Pick<ResourcesStore, "partnersConsenting">;
}

/** PartnerResourcesService.ListWallets: a user's wallets. */
export async function listWallets(
  deps: UserReadDeps<"listWallets">,
  req: ListWalletsRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof ListWalletsResponseSchema>> {
  await deps.access.authorize(ctx, {
    token: req.accessToken,
    operation: "wallets.read",
    userId: req.userId,
    scope: "wallet:read",
    auditRead: true,
    requestProblem: req.requestProblem,
    edgeRejection: req.edgeRejection,
  });
  const wallets = await deps.resources.listWallets(deps.db, req.userId);
  return { userId: req.userId, wallets };
}

/** PartnerResourcesService.GetUsAccount: a user's US bank account, or not_provisioned. */
export async function getUsAccount(
  deps: UserReadDeps<"getUsAccount">,
  req: GetUsAccountRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof GetUsAccountResponseSchema>> {
  await deps.access.authorize(ctx, {
    token: req.accessToken,
    operation: "us_account.read",
    userId: req.userId,
    scope: "us_account:read",
    auditRead: true,
    requestProblem: req.requestProblem,
    edgeRejection: req.edgeRejection,
  });
  const account = await deps.resources.getUsAccount(deps.db, req.userId);
  return usAccountOut(req.userId, account);
}

/** PartnerResourcesService.ListTransfers: one page of a user's transfers, oldest first. */
export async function listTransfers(
  deps: ListTransfersDeps,
  req: ListTransfersRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof ListTransfersResponseSchema>> {
  const principal = await deps.access.authorize(ctx, {
    token: req.accessToken,
    operation: "transfers.read",
    userId: req.userId,
    scope: "transfers:read",
    requestProblem: req.requestProblem,
    edgeRejection: req.edgeRejection,
  });
  const binding = `t:${principal.partnerId}:${req.userId}`;
  const { after, limit } = await deps.access.refusalsAudited(ctx, principal, "transfers.read", req.userId, async () => position(deps, req.page, binding));
  const rows = await listTransfersOf(deps.db, req.userId, after, limit + 1);
  const out = pageOut(deps, rows, limit, after, binding);
  // Paging input is validated before the audit row: a refused cursor reads nothing.
  await deps.access.audited(ctx, principal, "transfers.read", req.userId);
  return { data: out.page.map(transferOut), nextCursor: out.nextCursor, watermark: out.watermark };
}

/** PartnerResourcesService.AddWallet: the operator adds a public address to a user. */
export async function addWallet(deps: AddWalletDeps, req: AddWalletRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof AddWalletResponseSchema>> {
  if (!(CHAINS as readonly string[]).includes(req.chain)) fail(Reason.INVALID_REQUEST, `chain must be one of ${CHAINS.join(", ")}`);
  const evm = /^0x[0-9a-fA-F]{40}$/;
  const solana = /^[1-9A-HJ-NP-Za-km-z]{32,44}$/;
  if (!(req.chain === "sol" ? solana : evm).test(req.address)) fail(Reason.INVALID_REQUEST, `address is not a valid ${req.chain} address`);
  const wallets = await adminChange(deps, ctx, "creates", "user.add_wallet", req.userId, async (trx) => {
    await lockUser(deps, trx, req.userId);
    await deps.resources.addWallet(trx, req.userId, req.chain, req.address, deps.clock());
    return deps.resources.listWallets(trx, req.userId);
  });
  return { userId: req.userId, wallets };
}

/** PartnerResourcesService.ProvisionUsAccount: the operator gives a user a sandbox US bank account. */
export async function provisionUsAccount(
  deps: ProvisionUsAccountDeps,
  req: ProvisionUsAccountRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof ProvisionUsAccountResponseSchema>> {
  const account = await adminChange(deps, ctx, "creates", "user.provision_us_account", req.userId, async (trx) => {
    await lockUser(deps, trx, req.userId);
    const user = await deps.users.findById(trx, req.userId);
    await deps.resources.insertUsAccount(
      trx,
      {
        userId: req.userId,
        bankName: "Vaultgate Sandbox Bank",
        routingNumber: "021000021",
        accountNumber: String(randomInt(10 ** 9, 10 ** 10)) + String(randomInt(100, 1000)),
        accountType: "checking",
        beneficiaryName: user!.email,
      },
      deps.clock(),
    );
    return deps.resources.getUsAccount(trx, req.userId);
  });
  return { account: usAccountOut(req.userId, account) };
}

/** PartnerResourcesService.RecordLedgerEntry: the operator records a transfer; a final one is an event. */
export async function recordLedgerEntry(
  deps: RecordLedgerEntryDeps,
  req: RecordLedgerEntryRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof RecordLedgerEntryResponseSchema>> {
  if (req.direction !== "credit" && req.direction !== "debit") fail(Reason.INVALID_REQUEST, "direction must be credit or debit");
  const amount = Number(req.amountCents);
  if (!Number.isSafeInteger(amount) || amount < 1) fail(Reason.INVALID_REQUEST, "amount_cents must be an integer from 1 to 9007199254740991");
  const currency = req.currency || "USD";
  if (!isCurrencyCode(currency)) fail(Reason.INVALID_REQUEST, "currency must be an ISO 4217 code");
  const status = req.status || "settled";
  if (!["pending", "settled", "failed"].includes(status)) fail(Reason.INVALID_REQUEST, "status must be pending, settled or failed");
  const entry = await adminChange(deps, ctx, "creates", "ledger.record", req.userId, async (trx) => {
    const user = await lockUser(deps, trx, req.userId);
    const now = deps.clock();
    const e = await insertTransferEntry(trx, {
      id: randomUUID(),
      userId: req.userId,
      direction: req.direction as LedgerEntry["direction"],
      amountCents: amount,
      currency,
      status: status as LedgerEntry["status"],
      createdAt: now,
      updatedAt: now,
    });
    if (e.status !== "pending") {
      await emit(deps, trx, user, "transfers:read", e.status === "settled" ? "transfer.settled" : "transfer.failed", {
        user_id: e.userId,
        ...transferJson(e),
      });
    }
    return e;
  });
  return { transfer: transferOut(entry) };
}
