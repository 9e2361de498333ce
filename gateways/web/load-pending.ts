import type { FastifyRequest } from "fastify";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { AgentSummary } from "../../gen/vaultgate/grants/v1/dashboard_pb.js";
import { noteRefusal } from "../request-log.js";
import { PageError, type Current, type WebContext } from "./context.js";
import type { PendingApprovals } from "./views/pending.js";

/** How many payments and draft budgets a dashboard page lists per section; the rest follow page by page. */
const PENDING_PAGE = 20;
/** The query parameters that carry where each paged list resumes (core's signed cursors). */
const AFTER = { budgets: "budgets_after", payments: "payments_after" } as const;
/** What a cursor may look like in an address (core/paging.ts: base64url, a dot, base64url). */
const CURSOR = /^[A-Za-z0-9_-]{1,1024}\.[A-Za-z0-9_-]{1,64}$/;

/** A cursor from the page's query ("" when none), checked for shape (a bad one is a 400 page, never sent on). */
export function cursorParam(query: Record<string, unknown>, name: string): string {
  const v = query[name];
  if (v === undefined || v === "") return "";
  if (typeof v !== "string" || !CURSOR.test(v)) throw expiredLink();
  return v;
}

function cursorsOf(query: Record<string, unknown>): { budgets: string; payments: string } {
  return { budgets: cursorParam(query, AFTER.budgets), payments: cursorParam(query, AFTER.payments) };
}

/** The page for a cursor core refused (changed, another user's or another list's). */
export const expiredLink = () =>
  new PageError(400, "This page link cannot be used", "It may have been changed or it belongs to another account. Start again from the first page.");

/**
 * Reads the user's pending approvals (BudgetsService) and agent names (GrantsService), only
 * `agentId`'s or the one payment `paymentId` when given. With `pagedAt` (the page's own path), each list holds at most
 * PENDING_PAGE items, from where the page's query says, and `next` links to the following page of each.
 */
export async function loadPending(
  ctx: WebContext,
  request: FastifyRequest,
  current: Current,
  options: { known?: AgentSummary[]; pagedAt?: string; agentId?: string; paymentId?: string } = {},
): Promise<PendingApprovals> {
  const { known, pagedAt } = options;
  const cursors = pagedAt ? cursorsOf(request.query as Record<string, unknown>) : { budgets: "", payments: "" };
  const [pending, agents] = await Promise.all([
    ctx.budgets
      .listPendingApprovals(
        {
          sessionToken: current.token,
          limit: pagedAt ? PENDING_PAGE : 0,
          budgetsCursor: cursors.budgets,
          paymentsCursor: cursors.payments,
          agentPrincipalId: options.agentId ?? "",
          paymentId: options.paymentId ?? "",
        },
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
