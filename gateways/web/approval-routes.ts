import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { timestampDate, type Timestamp } from "@bufbuild/protobuf/wkt";
import type { Budget, Payment } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { AgentSummary, WebSession } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { html, type Html } from "./html.js";
import { PageError, type WebContext } from "./plugin.js";
import { noteRefusal } from "../request-log.js";
import { UUID } from "../shared/uuid.js";

type Current = { token: string; session: WebSession };

/** What the signed-in user may approve, with agent names for the words on the page. */
export interface PendingApprovals {
  budgets: Budget[];
  payments: Payment[];
  agentName(agentId: string): string;
  /** Paged lists only: the page's address with the next page of a list (empty when none follows). */
  next?: { budgets: string; payments: string; first: string };
}

/** How many payments and draft budgets a dashboard page lists per section; the rest follow page by page. */
export const PENDING_PAGE = 20;
/** The query parameters that carry where each paged list resumes (core's signed cursors). */
const AFTER = { budgets: "budgets_after", payments: "payments_after" } as const;
/** What a cursor may look like in an address (core/paging.ts: base64url, a dot, base64url). */
const CURSOR = /^[A-Za-z0-9_-]{1,1024}\.[A-Za-z0-9_-]{1,64}$/;

/** The page's cursors from its query, each checked for shape (a bad one is a 400 page, never sent on). */
function cursorsOf(query: Record<string, unknown>): { budgets: string; payments: string } {
  const one = (name: string) => {
    const v = query[name];
    if (v === undefined || v === "") return "";
    if (typeof v !== "string" || !CURSOR.test(v)) throw expiredLink();
    return v;
  };
  return { budgets: one(AFTER.budgets), payments: one(AFTER.payments) };
}

const expiredLink = () => new PageError(400, "This page link cannot be used", "It may have been changed or it belongs to another account. Start again from the first page.");

/** The review page of a pending payment; `step_up_url` (core) redirects here. */
export const paymentPath = (paymentId: string) => `/dashboard/approvals/payments/${paymentId}`;
/** The review page of a draft budget, named by its child agent principal. */
export const budgetPath = (agentId: string) => `/dashboard/approvals/budgets/${agentId}`;

/** Cents in the vault's currency, e.g. "$12.34" or "12.34 XYZ" for a code Intl does not know. */
export function money(cents: bigint | number, currency: string): string {
  const units = Number(cents) / 100;
  try {
    return new Intl.NumberFormat("en-US", { style: "currency", currency: currency || "USD" }).format(units);
  } catch {
    return `${units.toFixed(2)} ${currency}`;
  }
}

const day = (t: Timestamp) => timestampDate(t).toISOString().replace("T", " ").slice(0, 16) + " UTC";

/**
 * Reads the user's pending approvals (BudgetsService) and agent names (GrantsService).
 * With `pagedAt` (the page's own path), each list holds at most PENDING_PAGE items, from
 * where the page's query says, and `next` links to the following page of each.
 */
export async function loadPending(ctx: WebContext, request: FastifyRequest, current: Current, known?: AgentSummary[], pagedAt?: string): Promise<PendingApprovals> {
  const cursors = pagedAt ? cursorsOf(request.query as Record<string, unknown>) : { budgets: "", payments: "" };
  const [pending, agents] = await Promise.all([
    ctx.budgets
      .listPendingApprovals(
        { sessionToken: current.token, limit: pagedAt ? PENDING_PAGE : 0, budgetsCursor: cursors.budgets, paymentsCursor: cursors.payments },
        ctx.rpc(request),
      )
      .catch((err: unknown) => {
        if (noteRefusal(request, err) === Reason.INVALID_CURSOR) throw expiredLink();
        throw err;
      }),
    known ?? ctx.grants.listAgents({ sessionToken: current.token }, ctx.rpc(request)).then((r) => r.agents),
  ]);
  const link = (budgets: string, payments: string) => {
    const q = new URLSearchParams();
    if (budgets) q.set(AFTER.budgets, budgets);
    if (payments) q.set(AFTER.payments, payments);
    const qs = q.toString();
    return `${pagedAt}${qs ? `?${qs}` : ""}`;
  };
  const names = new Map<string, string>(agents.map((a) => [a.agentId, a.displayName]));
  for (const b of pending.draftBudgets) if (b.displayName) names.set(b.agentPrincipalId, b.displayName);
  return {
    budgets: pending.draftBudgets,
    payments: pending.pendingPayments,
    agentName: (id) => names.get(id) ?? (id ? `Agent ${id.slice(0, 8)}` : "An agent"),
    next: pagedAt
      ? {
          // Each list moves on by itself; the other stays where it is.
          budgets: pending.nextBudgetsCursor ? link(pending.nextBudgetsCursor, cursors.payments) : "",
          payments: pending.nextPaymentsCursor ? link(cursors.budgets, pending.nextPaymentsCursor) : "",
          first: cursors.budgets || cursors.payments ? link("", "") : "",
        }
      : undefined,
  };
}

/** A budget's limits as sentences (spec 2.1 fields). */
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
  if (l.timeWindowEnd) out.push(html`Until ${day(l.timeWindowEnd)}`);
  return out;
}

function paymentWords(p: Payment, agentName: string): Html {
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
    (p) => html`<li><p>${paymentWords(p, pending.agentName(p.agentPrincipalId))}<br><span class="muted">Asked ${p.createdAt ? day(p.createdAt) : ""}</span></p>
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

/** Pending payment review and approval, draft budget review and activation (DESIGN 4.1, 4.2). */
export async function approvalRoutes(app: FastifyInstance, ctx: WebContext) {
  /** Unknown, malformed, already decided and another user's items all get this one page. */
  const nothing = (what: "payment" | "budget") =>
    new PageError(404, "Nothing to approve here", `There is no ${what} waiting for your approval at this address. It may have been approved already, or the link is wrong.`);

  const stepUpNote = (s: WebSession) =>
    s.stepUpFresh
      ? html`<p class="muted">You confirmed it's you a moment ago.</p>`
      : html`<p class="muted">Before it takes effect we will ask you to confirm it's you with a code sent by e-mail.</p>`;

  async function signedIn(request: FastifyRequest, reply: FastifyReply, here: string): Promise<Current | undefined> {
    const current = await ctx.session(request);
    if (!current) ctx.signInRedirect(reply, here);
    return current;
  }

  /** Core refuses a stale step-up with ACCESS_DENIED: back through the step-up page. */
  async function approve(reply: FastifyReply, here: string, call: () => Promise<unknown>, done: string) {
    try {
      await call();
    } catch (err) {
      if (noteRefusal(reply.request, err) === Reason.ACCESS_DENIED) return reply.redirect(`/stepup?return_to=${encodeURIComponent(here)}`, 303);
      throw err;
    }
    return reply.redirect(done, 303);
  }

  app.get("/dashboard/approvals/payments/:paymentId", async (request, reply) => {
    const { paymentId } = request.params as { paymentId: string };
    if (!UUID.test(paymentId)) throw nothing("payment");
    const here = paymentPath(paymentId);
    const current = await signedIn(request, reply, here);
    if (!current) return reply;
    const pending = await loadPending(ctx, request, current);
    const p = pending.payments.find((x) => x.paymentId === paymentId.toLowerCase());
    if (!p) throw nothing("payment");
    const csrf = ctx.csrfToken(request, reply);
    return ctx.send(
      reply,
      200,
      "Approve this payment?",
      html`<section class="card">
        <p>${paymentWords(p, pending.agentName(p.agentPrincipalId))}</p>
        <table>
          <tr><th>Agent</th><td>${pending.agentName(p.agentPrincipalId)}</td></tr>
          <tr><th>Amount</th><td>${money(p.amountCents, p.currency)} (${p.currency})</td></tr>
          <tr><th>To</th><td><code>${p.counterparty?.address ?? ""}</code></td></tr>
          <tr><th>Chain</th><td>${p.counterparty?.chain ?? ""}</td></tr>
          <tr><th>Token</th><td>${p.counterparty?.token ?? ""}</td></tr>
          <tr><th>Asked</th><td>${p.createdAt ? day(p.createdAt) : ""}</td></tr>
          <tr><th>Reference</th><td><code>${p.paymentId}</code></td></tr>
        </table>
      </section>
      <form class="card" method="post" action="${here}/approve">
        <p>It is over the amount that needs your approval. Once you approve, the agent's next identical request completes the payment.</p>
        ${stepUpNote(current.session)}
        <input type="hidden" name="csrf" value="${csrf}">
        <button type="submit">Approve payment</button>
      </form>
      <form class="card" method="post" action="${here}/decline">
        <p>Not expected? Decline it: it will never be paid, and the agent's repeated request is refused. You can also revoke the agent's access from <a href="/dashboard/agents">your agents</a>.</p>
        <input type="hidden" name="csrf" value="${csrf}">
        <button type="submit" class="secondary">Decline payment</button>
      </form>`,
      { email: current.session.email, csrf },
    );
  });

  app.post("/dashboard/approvals/payments/:paymentId/approve", async (request, reply) => {
    const { paymentId } = request.params as { paymentId: string };
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    if (!UUID.test(paymentId)) throw nothing("payment");
    const here = paymentPath(paymentId);
    const current = await signedIn(request, reply, here);
    if (!current) return reply;
    if (!current.session.stepUpFresh) return reply.redirect(`/stepup?return_to=${encodeURIComponent(here)}`, 303);
    const call = () =>
      ctx.budgets.approvePayment({ sessionToken: current.token, paymentId }, ctx.rpc(request)).catch((err: unknown) => {
        if (noteRefusal(request, err) === Reason.NOT_FOUND) throw nothing("payment");
        throw err;
      });
    return approve(reply, here, call, "/dashboard/agents?done=payment-approved");
  });

  /**
   * Declining needs the session and the CSRF token but no step-up (it only takes a
   * possibility away). Core makes it idempotent; anything not pending is the 404 page.
   */
  async function decline(request: FastifyRequest, reply: FastifyReply, what: "payment" | "budget", id: string, call: (current: Current) => Promise<unknown>) {
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    if (!UUID.test(id)) throw nothing(what);
    const current = await signedIn(request, reply, what === "payment" ? paymentPath(id) : budgetPath(id));
    if (!current) return reply;
    try {
      await call(current);
    } catch (err) {
      if (noteRefusal(request, err) === Reason.NOT_FOUND) throw nothing(what);
      throw err;
    }
    return reply.redirect(`/dashboard/agents?done=${what}-declined`, 303);
  }

  app.post("/dashboard/approvals/payments/:paymentId/decline", async (request, reply) => {
    const { paymentId } = request.params as { paymentId: string };
    return decline(request, reply, "payment", paymentId, (current) =>
      ctx.budgets.declinePayment({ sessionToken: current.token, paymentId }, ctx.rpc(request)),
    );
  });

  app.post("/dashboard/approvals/budgets/:agentId/decline", async (request, reply) => {
    const { agentId } = request.params as { agentId: string };
    return decline(request, reply, "budget", agentId, (current) =>
      ctx.budgets.declineBudget({ sessionToken: current.token, agentPrincipalId: agentId }, ctx.rpc(request)),
    );
  });

  app.get("/dashboard/approvals/budgets/:agentId", async (request, reply) => {
    const { agentId } = request.params as { agentId: string };
    if (!UUID.test(agentId)) throw nothing("budget");
    const here = budgetPath(agentId);
    const current = await signedIn(request, reply, here);
    if (!current) return reply;
    const pending = await loadPending(ctx, request, current);
    const b = pending.budgets.find((x) => x.agentPrincipalId === agentId.toLowerCase());
    if (!b) throw nothing("budget");
    const csrf = ctx.csrfToken(request, reply);
    return ctx.send(
      reply,
      200,
      "Activate this budget?",
      html`<section class="card">
        <p>An agent asked for a new budget <strong>${b.displayName}</strong>: its own agent and vault under yours, with these limits:</p>
        <ul>${limitWords(b).map((w) => html`<li>${w}</li>`)}</ul>
        <p class="muted">Agent <code>${b.agentPrincipalId}</code> · vault <code>${b.vaultId}</code>${b.createdAt ? html` · asked ${day(b.createdAt)}` : ""}</p>
      </section>
      <form class="card" method="post" action="${here}/activate">
        <p>Until you activate it, the budget cannot spend anything.</p>
        ${stepUpNote(current.session)}
        <input type="hidden" name="csrf" value="${csrf}">
        <button type="submit">Activate budget</button>
      </form>
      <form class="card" method="post" action="${here}/decline">
        <p>Don't want it? Decline it: the budget can never be activated or spend anything.</p>
        <input type="hidden" name="csrf" value="${csrf}">
        <button type="submit" class="secondary">Decline budget</button>
      </form>
      <p><a href="/dashboard/agents">All agents</a></p>`,
      { email: current.session.email, csrf },
    );
  });

  app.post("/dashboard/approvals/budgets/:agentId/activate", async (request, reply) => {
    const { agentId } = request.params as { agentId: string };
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    if (!UUID.test(agentId)) throw nothing("budget");
    const here = budgetPath(agentId);
    const current = await signedIn(request, reply, here);
    if (!current) return reply;
    if (!current.session.stepUpFresh) return reply.redirect(`/stepup?return_to=${encodeURIComponent(here)}`, 303);
    const call = () =>
      ctx.budgets
        .activateBudget({ sessionToken: current.token, agentPrincipalId: agentId }, ctx.rpc(request))
        .catch((err: unknown) => {
          if (noteRefusal(request, err) === Reason.NOT_FOUND) throw nothing("budget");
          throw err;
        });
    return approve(reply, here, call, "/dashboard/agents?done=budget-activated");
  });
}
