import type { FastifyRequest } from "fastify";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { AgentSummary } from "../../gen/vaultgate/grants/v1/dashboard_pb.js";
import { noteRefusal } from "../request-log.js";
import type { Current, WebContext } from "./context.js";
import { isolated } from "../../lib/text.js";
import { expiredLink, listCursors, pageLink, type ListCursors } from "./page-links.js";
import type { PendingApprovals } from "./views/pending.js";

/** How many payments and draft budgets a dashboard page lists per section; the rest follow page by page. */
const PENDING_PAGE = 20;
/** ListAgents names at most this many agents by id per call. */
const NAMES_PER_LOOKUP = 100;

/**
 * The user's pending approvals (BudgetsService) and agent names (`known`, else looked up), only `agentId`'s or payment `paymentId`
 * when given. With `pagedAt` (the page's path), PENDING_PAGE of each list from where the query says,
 * `next` linking to the following page of each and keeping the page's other lists (`keep`) where they are.
 */
export async function loadPending(
  ctx: WebContext,
  request: FastifyRequest,
  current: Current,
  options: { known?: AgentSummary[]; pagedAt?: string; keep?: ListCursors; agentId?: string; paymentId?: string } = {},
): Promise<PendingApprovals> {
  const { known, pagedAt } = options;
  const cursors = { budgets: "", payments: "", ...(pagedAt ? listCursors(request.query as Record<string, unknown>, ["budgets", "payments"]) : {}) };
  const pending = await ctx.budgets
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
    });
  const link = (budgets: string, payments: string) => pageLink(pagedAt!, { ...options.keep, budgets, payments });
  const names = new Map<string, string>((known ?? []).map((a) => [a.agentId, a.displayName]));
  for (const b of pending.draftBudgets) if (b.displayName) names.set(b.agentPrincipalId, b.displayName);
  // The agents these items name that the page does not list: looked up by id, a hundred at a time.
  const unnamed = [...new Set([...pending.pendingPayments, ...pending.draftBudgets].map((x) => x.agentPrincipalId))].filter((id) => id && !names.has(id));
  for (let i = 0; i < unnamed.length; i += NAMES_PER_LOOKUP) {
    const { agents } = await ctx.grants.listAgents({ sessionToken: current.token, agentIds: unnamed.slice(i, i + NAMES_PER_LOOKUP) }, ctx.rpc(request));
    for (const a of agents) names.set(a.agentId, a.displayName);
  }
  return {
    budgets: pending.draftBudgets,
    payments: pending.pendingPayments,
    agentName: (id) => {
      const name = names.get(id);
      return name ? isolated(name) : id ? `Agent ${id.slice(0, 8)}` : "An agent";
    },
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
