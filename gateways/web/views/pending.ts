import type { Budget } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import type { Payment } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { html, type Html } from "./html.js";
import { money, utcMinute } from "../format.js";
import { budgetPath, paymentPath } from "../paths.js";

/** What the signed-in user may approve, with agent names for the words on the page. */
export interface PendingApprovals {
  budgets: Budget[];
  payments: Payment[];
  agentName(agentId: string): string;
  /** Paged lists only: the page's address with the next page of a list (empty when none follows). */
  next?: { budgets: string; payments: string; first: string };
}

/** A budget's limits as sentences . */
export function limitWords(b: Budget): Html[] {
  const l = b.limits;
  const cur = l?.currency ?? "";
  const out: Html[] = [];
  if (!l) return out;
  if (l.purpose) out.push(html`Purpose: ${l.purpose}`);
  out.push(l.amountCapCentsPerTx !== undefined ? html`At most ${money(l.amountCapCentsPerTx, cur)} per payment` : html`No limit per payment`);
  out.push(l.amountCapCentsPerDay !== undefined ? html`At most ${money(l.amountCapCentsPerDay, cur)} per day (UTC)` : html`No daily limit`);
  out.push(l.amountCapCentsLifetime !== undefined ? html`At most ${money(l.amountCapCentsLifetime, cur)} in total` : html`No lifetime limit`);
  if (l.stepUpAmountCents !== undefined) out.push(html`Payments over ${money(l.stepUpAmountCents, cur)} wait for your approval`);
  out.push(l.chainAllowlist.length ? html`Only on ${l.chainAllowlist.length === 1 ? "chain" : "chains"}: ${l.chainAllowlist.join(", ")}` : html`On any chain`);
  if (l.timeWindowEnd) out.push(html`Until ${utcMinute(l.timeWindowEnd)}`);
  return out;
}

/** One pending payment in a sentence. */
export function paymentWords(p: Payment, agentName: string): Html {
  const c = p.counterparty;
  return html`A payment of <strong>${money(p.amountCents, p.currency)}</strong>${c ? html` in ${c.token} on <strong>${c.chain}</strong> to <code>${c.address}</code>` : ""}, requested by <strong>${agentName}</strong>.`;
}

/** A CSRF-protected Decline button (no step-up: declining only takes a possibility away). */
function declineForm(action: string, csrf: string, label: string): Html {
  return html`<form method="post" action="${action}"><input type="hidden" name="csrf" value="${csrf}"><button type="submit" class="secondary">${label}</button></form>`;
}

/** The dashboard's "Pending approvals" card, each item with its review link and a Decline button. */
export function pendingSection(pending: PendingApprovals, csrf: string): Html {
  if (pending.budgets.length === 0 && pending.payments.length === 0) {
    return html`<section class="card"><p class="muted">Nothing is waiting for your approval.</p></section>`;
  }
  const payments = pending.payments.map(
    (p) => html`<li><p>${paymentWords(p, pending.agentName(p.agentPrincipalId))}<br><span class="muted">Asked ${utcMinute(p.createdAt)}</span></p>
      <p><a href="${paymentPath(p.paymentId)}">Review payment</a></p>${declineForm(`${paymentPath(p.paymentId)}/decline`, csrf, "Decline payment")}</li>`,
  );
  const budgets = pending.budgets.map(
    (b) => html`<li><p><strong>${pending.agentName(b.agentPrincipalId)}</strong>: a new budget waiting to be activated.</p>
      <ul>${limitWords(b).map((w) => html`<li>${w}</li>`)}</ul>
      <p><a href="${budgetPath(b.agentPrincipalId)}">Review budget</a></p>${declineForm(`${budgetPath(b.agentPrincipalId)}/decline`, csrf, "Decline budget")}</li>`,
  );
  const more = (href: string | undefined, what: string) => (href ? html`<p class="pager"><a rel="next" href="${href}">Next ${what} →</a></p>` : "");
  const next = pending.next;
  return html`${payments.length ? html`<section class="card"><h3>Payments</h3><ul>${payments}</ul>${more(next?.payments, "payments")}</section>` : ""}
    ${budgets.length ? html`<section class="card"><h3>Budgets</h3><ul>${budgets}</ul>${more(next?.budgets, "budgets")}</section>` : ""}
    ${next?.first ? html`<p class="pager"><a href="${next.first}">Back to the first approvals</a></p>` : ""}`;
}
