import { randomBytes } from "node:crypto";
import { BudgetStatus, type VaultView } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { PaymentStatus, type Payment } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { UUID } from "../../../lib/uuid.js";
import { isolated } from "../../../lib/text.js";
import { money, utcMinute } from "../format.js";
import { agentPath, budgetPath, closePath, fundPath, paymentPath, sweepPath, vaultAnchor } from "../paths.js";
import { html, type Html } from "./html.js";

/** The largest amount core accepts (2^53-1 cents), in whole units. */
const MAX_UNITS_DIGITS = 13;

/**
 * A typed amount ("12", "12.5", "1,250.00", "$12.50") in cents, or an error in words.
 * Two decimals at most: every vault currency is kept in hundredths.
 */
export function parseAmount(raw: string | undefined): { cents: bigint } | { error: string } {
  const text = (raw ?? "")
    .trim()
    .replace(/^\$/, "")
    .replace(/,(?=\d{3}(\D|$))/g, "");
  const m = new RegExp(`^(\\d{1,${MAX_UNITS_DIGITS}})(?:\\.(\\d{1,2}))?$`).exec(text);
  if (!m) return { error: "Enter an amount such as 25 or 25.50 (at most two decimals)." };
  const cents = BigInt(m[1]!) * 100n + BigInt((m[2] ?? "").padEnd(2, "0"));
  if (cents <= 0n) return { error: "Enter an amount greater than zero." };
  return { cents };
}

/** A fresh idempotency key for one rendering of a Fund form: submitting that form twice moves the money once. */
const formKey = () => randomBytes(18).toString("base64url");
/** What the Fund form's hidden key may look like (what formKey makes, with room to spare). */
export const FORM_KEY = /^[A-Za-z0-9_-]{16,64}$/;

const STATUS_WORDS: Partial<Record<BudgetStatus, string>> = {
  [BudgetStatus.DRAFT]: "Waiting for your activation",
  [BudgetStatus.ACTIVE]: "Active",
  [BudgetStatus.DECLINED]: "Declined",
  [BudgetStatus.CLOSED]: "Closed",
};

const PAYMENT_WORDS: Partial<Record<PaymentStatus, string>> = {
  [PaymentStatus.PENDING_STEP_UP]: "Waiting for your approval",
  [PaymentStatus.APPROVED]: "Approved, not yet paid",
  [PaymentStatus.COMPLETED]: "Paid",
  [PaymentStatus.DECLINED]: "Declined",
  [PaymentStatus.PENDING]: "Accepted, not yet sent",
  [PaymentStatus.SUBMITTED]: "Sent, confirming",
  [PaymentStatus.FAILED]: "Failed, refunded",
};

/**
 * A cap as a bar a person reads at a glance: the numbers in words, and a meter when there
 * is a cap; `none` says there is no such cap (empty for a vault without a policy).
 */
function bar(label: string, spent: bigint, cap: bigint | undefined, currency: string, none: string): Html {
  const amount = money(spent, currency);
  if (cap === undefined) {
    return html`<div class="bar"><div class="bar-text"><span>${label}</span><span class="num">${amount}${none ? html` <span class="muted">· ${none}</span>` : ""}</span></div></div>`;
  }
  const words = `${amount} of ${money(cap, currency)}`;
  const max = cap > 0n ? cap : 1n;
  // Green while under half the cap, amber towards it, red in its last tenth.
  return html`<div class="bar"><div class="bar-text"><span>${label}</span><span class="num">${words}</span></div>
    <meter min="0" max="${max}" low="${max / 2n}" high="${(max * 9n) / 10n}" optimum="0" value="${spent > max ? max : spent}" aria-label="${label}: ${words}">${words}</meter></div>`;
}

function shortAddress(address: string): string {
  return address.length > 14 ? `${address.slice(0, 6)}…${address.slice(-4)}` : address;
}

function paymentRow(p: Payment): Html {
  const c = p.counterparty;
  const status = PAYMENT_WORDS[p.status] ?? "Unknown";
  const statusCell = p.status === PaymentStatus.PENDING_STEP_UP ? html`<a href="${paymentPath(p.paymentId)}">${status}</a>` : html`${status}`;
  return html`<tr class="payment payment-${PaymentStatus[p.status]?.toLowerCase() ?? "unknown"}">
    <td class="num">${money(p.amountCents, p.currency)}</td>
    <td>${c ? html`<code title="${c.address}">${shortAddress(c.address)}</code><br><span class="muted">${c.token} on ${c.chain}</span>` : ""}</td>
    <td>${statusCell}${p.txHash ? html`<br><code class="tx-hash" title="${p.txHash}">${shortAddress(p.txHash)}</code>` : ""}<br><span class="muted">${utcMinute(p.createdAt)}</span></td></tr>`;
}

export interface CardOptions {
  csrf: string;
  /** The page the card's forms return to (the money view or an agent's page). */
  returnTo: string;
  /** Every vault of the view, to name a budget's parent. */
  all: VaultView[];
  /** An amount to put back in this vault's Fund form (after the step-up detour). */
  prefill?: { vaultId: string; amount: string };
  /** The vault whose Close form comes back with "keep the remaining funds" ticked (after the step-up detour). */
  keepFunds?: string;
}

/** A vault's name in words: a budget's display name, or "Your vault" for the root. */
function vaultName(v: VaultView, all: VaultView[]): string {
  if (v.parentVaultId) return v.displayName ? isolated(v.displayName) : `Budget ${v.vaultId.slice(0, 8)}`;
  const roots = all.filter((x) => !x.parentVaultId);
  return roots.length > 1 ? `Vault ${v.vaultId.slice(0, 8)}` : "Your vault";
}

/** One vault or budget: balance, spend against each cap, limits, recent payments and, for a budget, Fund and Close. */
export function vaultCard(v: VaultView, o: CardOptions): Html {
  const cur = v.currency;
  const l = v.limits;
  const isBudget = Boolean(v.parentVaultId);
  const parent = isBudget ? o.all.find((x) => x.vaultId === v.parentVaultId) : undefined;
  const parentName = parent ? vaultName(parent, o.all) : "the vault it came from";
  const status = isBudget ? (STATUS_WORDS[v.status] ?? "Unknown state") : "";
  const extra: Html[] = [];
  if (l?.amountCapCentsPerTx !== undefined) extra.push(html`At most ${money(l.amountCapCentsPerTx, cur)} per payment`);
  if (l?.stepUpAmountCents !== undefined) extra.push(html`over ${money(l.stepUpAmountCents, cur)} waits for your approval`);
  if (l?.chainAllowlist.length) extra.push(html`only on ${l.chainAllowlist.join(", ")}`);
  if (l?.timeWindowEnd) extra.push(html`until ${utcMinute(l.timeWindowEnd)}`);
  const canFund = isBudget && (v.status === BudgetStatus.ACTIVE || v.status === BudgetStatus.DRAFT);
  const canClose = isBudget && v.status !== BudgetStatus.CLOSED;
  // A budget closed with keep_funds still holds money: it can be moved back later.
  const canSweep = isBudget && v.status === BudgetStatus.CLOSED && v.balanceCents > 0n;
  const amountId = `amount-${v.vaultId}`;
  const prefill = o.prefill?.vaultId === v.vaultId ? o.prefill.amount : "";
  return html`<section class="card vault${isBudget ? " budget" : ""}" id="${vaultAnchor(v.vaultId)}">
    <div class="vault-head"><h3>${vaultName(v, o.all)}</h3>${status ? html`<span class="status status-${BudgetStatus[v.status]?.toLowerCase() ?? "unknown"}">${status}</span>` : ""}</div>
    ${
      isBudget
        ? html`<p class="muted">Budget under ${parentName}${l?.purpose ? html` · ${l.purpose}` : ""}${v.agentPrincipalId ? html` · <a href="${agentPath(v.agentPrincipalId)}">its agent</a>` : ""}</p>`
        : ""
    }
    ${v.status === BudgetStatus.DRAFT && v.agentPrincipalId ? html`<p><a href="${budgetPath(v.agentPrincipalId)}">Review and activate this budget</a></p>` : ""}
    <p class="balance"><span class="num big">${money(v.balanceCents, cur)}</span> <span class="muted">balance${cur ? ` (${cur})` : ""}</span></p>
    ${bar("Spent today (UTC)", v.spentTodayCents, l?.amountCapCentsPerDay, cur, l ? "no daily limit" : "")}
    ${bar("Spent in total", v.spentLifetimeCents, l?.amountCapCentsLifetime, cur, l ? "no lifetime limit" : "")}
    ${extra.length ? html`<p class="muted">${extra.map((e, i) => (i ? html` · ${e}` : e))}</p>` : ""}
    ${
      v.recentPayments.length
        ? html`<details${v.recentPayments.some((p) => p.status === PaymentStatus.PENDING_STEP_UP) || isBudget ? " open" : ""}><summary>Recent payments</summary>
          <table class="payments">${v.recentPayments.map(paymentRow)}</table></details>`
        : html`<p class="muted">No payments yet.</p>`
    }
    ${
      canFund
        ? html`<form class="money-form" method="post" action="${fundPath(v.vaultId)}">
          <input type="hidden" name="csrf" value="${o.csrf}"><input type="hidden" name="idempotency_key" value="${formKey()}"><input type="hidden" name="return_to" value="${o.returnTo}">
          <label for="${amountId}">Move money from ${parentName} into this budget</label>
          <input id="${amountId}" type="text" name="amount" inputmode="decimal" autocomplete="off" placeholder="0.00" value="${prefill}" required>
          <button type="submit">Fund</button>
        </form>`
        : ""
    }
    ${
      canClose
        ? html`<form class="money-form" method="post" action="${closePath(v.vaultId)}">
          <input type="hidden" name="csrf" value="${o.csrf}"><input type="hidden" name="return_to" value="${o.returnTo}">
          ${
            // Declining already sent its money up, and so will every refund that reaches it: nothing to keep.
            v.status === BudgetStatus.DECLINED
              ? html`<p class="muted">Closing revokes its agents' access. Its money, and any refund that reaches it later, goes back to ${parentName}.</p>`
              : html`<p class="muted">Closing revokes its agents' access and stops all spending. Unless you keep them, the remaining funds go back to ${parentName}.</p>
          <label class="check"><input type="checkbox" name="keep_funds" value="yes"${o.keepFunds === v.vaultId ? html` checked` : ""}> Keep the remaining funds in this budget</label>`
          }
          <button type="submit" class="danger">Close budget</button>
        </form>`
        : ""
    }
    ${
      canSweep
        ? html`<form class="money-form" method="post" action="${sweepPath(v.vaultId)}">
          <input type="hidden" name="csrf" value="${o.csrf}"><input type="hidden" name="return_to" value="${o.returnTo}">
          <p class="muted">This closed budget kept its funds. Nothing can spend them here.</p>
          <button type="submit">Move ${money(v.balanceCents, cur)} back to ${parentName}</button>
        </form>`
        : ""
    }
  </section>`;
}

/** Fixed notices a money action leaves for the page it redirects to (never echoed). */
export const MONEY_NOTICES: Record<string, string> = {
  funded: "The budget was funded.",
  "fund-replayed": "That form had already been sent: the money moved once, not twice.",
  closed: "The budget was closed. Its agents lost access, and its remaining funds went back to the vault it came from.",
  "closed-kept": "The budget was closed. Its agents lost access; its remaining funds stay in it.",
  "already-closed": "That budget was already closed. Nothing changed.",
  swept: "The money the closed budget kept went back to the vault it came from.",
  "nothing-to-sweep": "That closed budget holds nothing any more. Nothing moved.",
};

/** Back from the step-up detour of a money form (`?done=stepped-up`). */
export const STEPPED_UP_NOTICE = "You confirmed it's you. Send the form again to move the money.";

/** Is this query value a well-formed amount to prefill (the step-up detour keeps what was typed)? */
export function prefillFrom(query: Record<string, unknown>): CardOptions["prefill"] {
  const vaultId = query.fund;
  const amount = query.amount;
  if (typeof vaultId !== "string" || !UUID.test(vaultId) || typeof amount !== "string" || amount.length > 24) return undefined;
  return "cents" in parseAmount(amount) ? { vaultId: vaultId.toLowerCase(), amount } : undefined;
}

/** The vault a Close form asked to keep its funds for, before its step-up detour (`?keep_funds=<vault id>`). */
export function keepFundsFrom(query: Record<string, unknown>): string | undefined {
  const vaultId = query.keep_funds;
  return typeof vaultId === "string" && UUID.test(vaultId) ? vaultId.toLowerCase() : undefined;
}
