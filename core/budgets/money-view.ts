import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { BudgetStatus, type GetMoneyViewRequest, type GetMoneyViewResponseSchema, type VaultViewSchema } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { PaymentStatus, type PaymentSchema } from "../../gen/vaultgate/budgets/v1/payments_pb.js";
import type { Db } from "../db/knex.js";
import type { SessionVerifier } from "../identity/sessions.js";
import { BUDGET_STATUS, limitsView, PAYMENT_STATUS, stepUpUrl } from "./views.js";
import { createMoneyViewStore, type MoneyPaymentRow, type MoneyVaultRow } from "./money-view-store.js";

export interface MoneyViewDeps {
  db: Db;
  sessions: SessionVerifier;
  clock: () => Date;
  /** `{app_url}`, for the step-up links of payments waiting for the owner. */
  appUrl: string;
}

type VaultView = MessageInitShape<typeof VaultViewSchema>;
type PaymentView = MessageInitShape<typeof PaymentSchema>;

/**
 * BudgetsService.GetMoneyView: the signed-in owner's vaults, each root followed by its budgets
 * depth first. The user comes from the session token, never the request; two statements in
 * one snapshot however many vaults there are, so the page stays consistent and cheap.
 */
export async function getMoneyView(deps: MoneyViewDeps, req: GetMoneyViewRequest): Promise<MessageInitShape<typeof GetMoneyViewResponseSchema>> {
  const owner = await deps.sessions.verify(req.sessionToken);
  const { vaults, payments } = await createMoneyViewStore(deps.db).read(owner.userId, deps.clock());

  const recent = new Map<string, PaymentView[]>();
  for (const p of payments) {
    const list = recent.get(p.vaultId) ?? [];
    list.push(paymentView(p, deps.appUrl));
    recent.set(p.vaultId, list);
  }

  // Rows arrive oldest first; children are listed under their parent, depth first.
  const ids = new Set(vaults.map((v) => v.vaultId));
  const children = new Map<string, MoneyVaultRow[]>();
  const roots: MoneyVaultRow[] = [];
  for (const v of vaults) {
    // A vault whose parent is not shown (not the user's, or mid-provisioning) stands on its own.
    if (v.parentVaultId && ids.has(v.parentVaultId)) children.set(v.parentVaultId, [...(children.get(v.parentVaultId) ?? []), v]);
    else roots.push(v);
  }
  const out: VaultView[] = [];
  const seen = new Set<string>();
  const visit = (v: MoneyVaultRow) => {
    if (seen.has(v.vaultId)) return;
    seen.add(v.vaultId);
    out.push(vaultView(v, recent.get(v.vaultId) ?? []));
    for (const c of children.get(v.vaultId) ?? []) visit(c);
  };
  for (const r of roots) visit(r);
  // A parent cycle cannot be built through the API; should one exist, its vaults still show.
  for (const v of vaults) visit(v);
  return { vaults: out };
}

function vaultView(v: MoneyVaultRow, recentPayments: PaymentView[]): VaultView {
  const p = v.policy;
  return {
    vaultId: v.vaultId,
    parentVaultId: v.parentVaultId ?? "",
    agentPrincipalId: v.agentPrincipalId ?? "",
    displayName: v.displayName,
    status: v.budgetStatus === null ? BudgetStatus.UNSPECIFIED : (BUDGET_STATUS[v.budgetStatus] ?? BudgetStatus.UNSPECIFIED),
    currency: v.currency,
    balanceCents: BigInt(v.balanceCents),
    spentTodayCents: BigInt(v.spentTodayCents),
    spentLifetimeCents: BigInt(v.spentLifetimeCents),
    limits: p ? limitsView(p, v.currency) : undefined,
    recentPayments,
  };
}

const SETTLED: Readonly<Record<string, PaymentStatus>> = {
  pending: PaymentStatus.PENDING,
  submitted: PaymentStatus.SUBMITTED,
  completed: PaymentStatus.COMPLETED,
  failed: PaymentStatus.FAILED,
};

/** As BudgetsService answers payments elsewhere: a step-up link only while the owner can still act on it. */
function paymentView(p: MoneyPaymentRow, appUrl: string): PaymentView {
  const open = p.status === "pending_step_up" || p.status === "approved";
  return {
    paymentId: p.id,
    vaultId: p.vaultId,
    status: (p.status === "completed" && p.settlement ? SETTLED[p.settlement] : PAYMENT_STATUS[p.status]) ?? PaymentStatus.UNSPECIFIED,
    txHash: p.txHash ?? "",
    amountCents: BigInt(p.amountCents),
    currency: p.currency,
    counterparty: { address: p.address, chain: p.chain, token: p.token },
    createdAt: timestampFromDate(p.createdAt),
    stepUpUrl: open ? stepUpUrl(appUrl, p) : "",
    agentPrincipalId: p.agentPrincipalId ?? "",
  };
}
