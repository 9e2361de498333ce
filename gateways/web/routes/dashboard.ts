import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import type { VaultView } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { noteRefusal } from "../../request-log.js";
import { PAYMENT_LINK_PARAM } from "../../../lib/app-paths.js";
import { UUID } from "../../../lib/uuid.js";
import { moneyReturnTo, PageError, type Current, type WebContext } from "../context.js";
import { isolated } from "../../../lib/text.js";
import { money } from "../format.js";
import { loadPending } from "../load-pending.js";
import { cursorParam, expiredLink, LISTS, listCursors } from "../page-links.js";
import {
  agentPath,
  AGENTS_PATH,
  closePath,
  DASHBOARD_PATH,
  fundPath,
  KILL_SWITCH_PATH,
  MONEY_PATH,
  paymentPath,
  revokePath,
  stepUpPath,
  sweepPath,
  vaultAnchor,
} from "../paths.js";
import { html, type Html } from "../views/html.js";
import { FORM_KEY, keepFundsFrom, MONEY_NOTICES, parseAmount, prefillFrom, STEPPED_UP_NOTICE, vaultCard, type CardOptions } from "../views/money.js";
import { pendingSection } from "../views/pending.js";
import { agentsSection, grantsSection } from "../views/grants.js";

/** Fixed notices an action leaves for the page it redirects to (ctx.notify); never echoed. */
const NOTICES: Record<string, string> = {
  killed: "Every grant was revoked. All agents have lost access.",
  "payment-approved": "The payment was approved. It completes when the agent repeats its request.",
  "budget-activated": "The budget is active. Its agent can now spend within its limits.",
  "payment-declined": "The payment was declined. It will not be paid.",
  "budget-declined": "The budget was declined. It can never be activated.",
  ...MONEY_NOTICES,
};

/** The agents the overview lists per page; the rest follow page by page. */
const AGENTS_PAGE = 50;
/** Left as `revoked.<agent id>`: shown on that agent's page only. */
const REVOKED_NOTICE = "The grant was revoked. Calls with its tokens are refused from now on.";

/**
 * How a refused Fund, Close or Sweep reads on the page (core's own message follows the title).
 * Reasons not listed go to the plugin's error pages.
 */
const MONEY_ERRORS: Partial<Record<Reason, { status: number; title: string; hint?: string }>> = {
  [Reason.INSUFFICIENT_FUNDS]: { status: 409, title: "Not enough money", hint: "The vault the money comes from holds less than that amount." },
  [Reason.INVALID_REQUEST]: { status: 400, title: "That could not be done" },
  [Reason.NOT_FOUND]: { status: 404, title: "No such budget", hint: "It may have been closed or removed meanwhile." },
  [Reason.IDEMPOTENCY_CONFLICT]: {
    status: 409,
    title: "That form was already used",
    hint: "Each Fund form moves money once, and this one was already sent with another amount. Enter the amount again below.",
  },
  [Reason.ACCESS_DENIED]: { status: 403, title: "Not allowed" },
  [Reason.POLICY_DENIED]: { status: 403, title: "Not allowed" },
  [Reason.VAULT_CONTENTION]: { status: 409, title: "The vault is busy", hint: "Another change to it is under way. Try again in a moment." },
};

/** A page-level answer to a Fund or Close form: the page it came from, with this card on top. */
interface Problem {
  status: number;
  card: Html;
}

/** {app_url}/dashboard/agents, /dashboard/agents/<agent_id> and the money view with its forms. */
export const dashboardRoutes: FastifyPluginAsync<{ ctx: WebContext }> = async (app, { ctx }) => {
  /**
   * The card of the notice an action left (`key`, from ctx.takeNotice). The step-up detour's flag
   * is the one notice an address asks for: shown only while the step-up is fresh, so it is true.
   */
  const notice = (request: FastifyRequest, current: Current, key: string | undefined) => {
    const steppedUp = (request.query as Record<string, unknown>).done === "stepped-up" && current.session.stepUpFresh;
    // Own keys only: "__proto__" or "constructor" would otherwise pick Object's own members.
    const text = key !== undefined && Object.hasOwn(NOTICES, key) ? NOTICES[key] : steppedUp ? STEPPED_UP_NOTICE : undefined;
    return text ? html`<div class="card ok"><p>${text}</p></div>` : html``;
  };

  app.get(DASHBOARD_PATH, async (_request, reply) => reply.redirect(AGENTS_PATH, 303));

  /** A payment's step_up_url (lib/app-paths.ts) leads to its review page, whatever the agent segment says. */
  const paymentLink = (request: FastifyRequest): string | undefined => {
    const id = (request.query as Record<string, unknown>)[PAYMENT_LINK_PARAM];
    if (id === undefined) return undefined;
    if (typeof id !== "string" || !UUID.test(id)) {
      throw new PageError(
        404,
        "Nothing to approve here",
        "There is no payment waiting for your approval at this address. It may have been approved already, or the link is wrong.",
      );
    }
    return paymentPath(id.toLowerCase());
  };

  app.get(AGENTS_PATH, async (request, reply) => {
    const link = paymentLink(request);
    if (link) return reply.redirect(link, 303);
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, AGENTS_PATH);
    const csrf = ctx.csrfToken(request, reply);
    const at = listCursors(request.query as Record<string, unknown>, ["agents", "budgets", "payments"]);
    const { agents, nextCursor } = await ctx.grants
      .listAgents({ sessionToken: current.token, limit: AGENTS_PAGE, cursor: at.agents ?? "" }, ctx.rpc(request))
      .catch((err: unknown) => {
        if (noteRefusal(request, err) === Reason.INVALID_CURSOR) throw expiredLink();
        throw err;
      });
    const pending = await loadPending(ctx, request, current, { known: agents, pagedAt: AGENTS_PATH, keep: { agents: at.agents } });
    const list = agentsSection(agents, { here: AGENTS_PATH, first: !at.agents, next: nextCursor, keep: at });
    return ctx.send(
      reply,
      200,
      "Your agents",
      html`${notice(request, current, ctx.takeNotice(request, reply))}
      <p><a href="${MONEY_PATH}">Your money: balances, budgets and spending</a></p>
      ${list}
      <h2>Pending approvals</h2>
      ${pendingSection(pending, csrf)}
      <h2>Kill switch</h2>
      <form class="card" method="post" action="${KILL_SWITCH_PATH}">
        <p>Revoke every grant of every agent at once. Agents must ask again.</p>
        <input type="hidden" name="csrf" value="${csrf}">
        <button type="submit" class="danger">Revoke all access</button>
      </form>`,
      { email: current.session.email, csrf },
    );
  });

  /** The owner's vaults and budgets (BudgetsService.GetMoneyView). */
  const loadMoney = async (request: FastifyRequest, current: Current): Promise<VaultView[]> =>
    (await ctx.budgets.getMoneyView({ sessionToken: current.token }, ctx.rpc(request))).vaults;

  const cardOptions = (request: FastifyRequest, csrf: string, returnTo: string, all: VaultView[]): CardOptions => ({
    csrf,
    returnTo,
    all,
    prefill: prefillFrom(request.query as Record<string, unknown>),
    keepFunds: keepFundsFrom(request.query as Record<string, unknown>),
  });

  /**
   * An agent's page: an OAuth client's agent with its grants, or a budget's own agent
   * (not an OAuth client: GetAgent does not know it) with its budget. Either way the
   * money it can reach and its pending approvals.
   */
  async function agentPage(request: FastifyRequest, reply: FastifyReply, current: Current, agentId: string, problem?: Problem) {
    const csrf = ctx.csrfToken(request, reply);
    const here = agentPath(agentId.toLowerCase());
    const query = request.query as Record<string, unknown>;
    const cursor = problem ? "" : cursorParam(query, LISTS.grants);
    // Where the page's pending lists stand, kept by the grants' links (and the other way round).
    const pendingAt = problem ? {} : listCursors(query, ["budgets", "payments"]);
    const [page, vaults, mine] = await Promise.all([
      ctx.grants.getAgent({ sessionToken: current.token, agentId, cursor }, ctx.rpc(request)).catch((err: unknown) => {
        const reason = noteRefusal(request, err);
        if (reason === Reason.NOT_FOUND) return undefined;
        if (reason === Reason.INVALID_CURSOR) throw expiredLink();
        throw err;
      }),
      loadMoney(request, current),
      // This agent's own pending approvals, paged, with the same review links and Decline buttons.
      loadPending(ctx, request, current, { pagedAt: here, keep: { grants: cursor }, agentId: agentId.toLowerCase() }),
    ]);
    const agent = page?.agent;
    const budget = vaults.find((v) => v.agentPrincipalId === agentId.toLowerCase());
    if (!agent && !budget) throw new PageError(404, "Not found", "There is no such agent.");
    const id = agent?.agentId ?? budget!.agentPrincipalId;
    // The money this agent reaches: its budget, and the vaults its active grants act on (all of them, not one page's).
    const grantVaults = new Set(page?.activeVaultIds ?? []);
    const reach = vaults.filter((v) => v === budget || grantVaults.has(v.vaultId));
    const options = cardOptions(request, csrf, here, vaults);
    const moneySection = reach.length ? html`<h2>${budget ? "Budget" : "Money it can reach"}</h2>${reach.map((v) => vaultCard(v, options))}` : html``;
    const name = agent?.displayName ?? budget!.displayName;
    const title = name ? isolated(name) : "Budget agent";
    const key = problem ? undefined : ctx.takeNotice(request, reply);
    const done = agent && key === `revoked.${agent.agentId}` ? html`<div class="card ok"><p>${REVOKED_NOTICE}</p></div>` : notice(request, current, key);
    return ctx.send(
      reply,
      problem?.status ?? 200,
      title,
      html`${problem?.card ?? done}
      <p class="muted">Agent <code>${id}</code>${agent?.clientId ? html` · client <code>${agent.clientId}</code>` : ""}${budget && !agent ? " · the agent of a budget" : ""}</p>
      ${moneySection}
      ${agent ? grantsSection(agent, csrf, { here, first: !cursor, next: page?.nextCursor ?? "", keep: pendingAt }) : ""}
      <h2>Pending approvals</h2>
      ${pendingSection(mine, csrf)}
      <p><a href="${AGENTS_PATH}">All agents</a> · <a href="${MONEY_PATH}">Your money</a></p>`,
      { email: current.session.email, csrf },
    );
  }

  app.get(agentPath(":agentId"), async (request, reply) => {
    const { agentId } = request.params as { agentId: string };
    const link = paymentLink(request);
    if (link) return reply.redirect(link, 303);
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, UUID.test(agentId) ? agentPath(agentId) : AGENTS_PATH);
    if (!UUID.test(agentId)) throw new PageError(404, "Not found", "There is no such agent.");
    return agentPage(request, reply, current, agentId);
  });

  /** {app_url}/dashboard/money: every vault and budget, spend against each cap, recent payments, pending approvals. */
  async function moneyPage(request: FastifyRequest, reply: FastifyReply, current: Current, problem?: Problem) {
    const csrf = ctx.csrfToken(request, reply);
    const [vaults, pending] = await Promise.all([loadMoney(request, current), loadPending(ctx, request, current, { pagedAt: MONEY_PATH })]);
    const options = cardOptions(request, csrf, MONEY_PATH, vaults);
    // What the owner holds in all, per currency (budgets' money is still the owner's).
    const totals = new Map<string, bigint>();
    for (const v of vaults) totals.set(v.currency, (totals.get(v.currency) ?? 0n) + v.balanceCents);
    const budgets = vaults.filter((v) => v.parentVaultId).length;
    return ctx.send(
      reply,
      problem?.status ?? 200,
      "Your money",
      html`${problem?.card ?? notice(request, current, ctx.takeNotice(request, reply))}
      <section class="card summary"><p><span class="num big">${[...totals].map(([cur, cents], i) => html`${i ? " + " : ""}${money(cents, cur)}`)}</span>
        <span class="muted">in ${vaults.length === 1 ? "your vault" : html`${vaults.length - budgets} vault${vaults.length - budgets === 1 ? "" : "s"} and ${budgets} budget${budgets === 1 ? "" : "s"}`}</span></p></section>
      ${vaults.map((v) => vaultCard(v, options))}
      <h2>Pending approvals</h2>
      ${pendingSection(pending, csrf)}
      <p><a href="${AGENTS_PATH}">Your agents</a></p>`,
      { email: current.session.email, csrf },
    );
  }

  app.get(MONEY_PATH, async (request, reply) => {
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, MONEY_PATH);
    return moneyPage(request, reply, current);
  });

  /** True when `agentId` has a page for this person: one of their agents, or a budget's own agent. */
  async function hasAgent(request: FastifyRequest, current: Current, agentId: string): Promise<boolean> {
    try {
      await ctx.grants.getAgent({ sessionToken: current.token, agentId }, ctx.rpc(request));
      return true;
    } catch (err) {
      if (noteRefusal(request, err) !== Reason.NOT_FOUND) throw err;
    }
    return (await loadMoney(request, current)).some((v) => v.agentPrincipalId === agentId);
  }

  /**
   * Fund, Close and Sweep: each needs the session, CSRF token and a fresh step-up (else a round
   * trip through the step-up page, typed amount kept). The Fund form's per-render idempotency
   * key makes a double submit move the money once.
   */
  async function moneyAction<T>(
    request: FastifyRequest,
    reply: FastifyReply,
    action: "fund" | "close" | "sweep",
    /** Reads the form; a PageError(400) is shown on the page, before any step-up detour. */
    check: (form: Map<string, string>) => T,
    call: (current: Current, input: T, vaultId: string) => Promise<string>,
  ) {
    const { vaultId: rawId } = request.params as { vaultId: string };
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const asked = moneyReturnTo(form.params.get("return_to"));
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, asked);
    if (!UUID.test(rawId)) throw new PageError(404, "No such budget", "There is no such budget.");
    const vaultId = rawId.toLowerCase();
    // An agent page that is not this person's (a tampered form) is ignored: the money view holds every form.
    const back = asked === MONEY_PATH || (await hasAgent(request, current, asked.slice(`${AGENTS_PATH}/`.length))) ? asked : MONEY_PATH;
    const show = (problem: Problem) =>
      back === MONEY_PATH ? moneyPage(request, reply, current, problem) : agentPage(request, reply, current, back.slice(`${AGENTS_PATH}/`.length), problem);
    const refused = (status: number, title: string, detail: string, hint?: string) =>
      show({ status, card: html`<div class="card error" role="alert"><p><strong>${title}.</strong> ${detail}</p>${hint ? html`<p>${hint}</p>` : ""}</div>` });

    // Back here after the step-up, with what was typed or chosen still in the form.
    const amount = form.params.get("amount") ?? "";
    const again =
      action === "fund" && amount.length <= 24 && "cents" in parseAmount(amount)
        ? `?done=stepped-up&fund=${vaultId}&amount=${encodeURIComponent(amount)}`
        : action === "close" && form.params.get("keep_funds") === "yes"
          ? `?done=stepped-up&keep_funds=${vaultId}`
          : "?done=stepped-up";
    const stepUp = () => reply.redirect(stepUpPath(`${back}${again}#${vaultAnchor(vaultId)}`), 303);
    let input: T;
    try {
      input = check(form.params);
    } catch (err) {
      if (err instanceof PageError && err.status === 400) return refused(400, err.title, err.detail);
      throw err;
    }
    if (!current.session.stepUpFresh) return stepUp();
    try {
      ctx.notify(reply, await call(current, input, vaultId));
      return reply.redirect(`${back}#${vaultAnchor(vaultId)}`, 303);
    } catch (err) {
      const reason = noteRefusal(request, err);
      const row = reason === undefined ? undefined : MONEY_ERRORS[reason];
      if (!row) throw err;
      // A step-up that went stale meanwhile: through the step-up page again.
      if (reason === Reason.ACCESS_DENIED) {
        const now = await ctx.session(request);
        if (now && !now.session.stepUpFresh) return stepUp();
      }
      return refused(row.status, row.title, (err as { rawMessage?: string }).rawMessage ?? "", row.hint);
    }
  }

  app.post(fundPath(":vaultId"), async (request, reply) =>
    moneyAction(
      request,
      reply,
      "fund",
      (form) => {
        const parsed = parseAmount(form.get("amount"));
        if ("error" in parsed) throw new PageError(400, "That amount cannot be used", parsed.error);
        const key = form.get("idempotency_key") ?? "";
        if (!FORM_KEY.test(key)) throw new PageError(400, "This form has expired", "Reload the page and try again.");
        return { amountCents: parsed.cents, idempotencyKey: key };
      },
      async (current, input, vaultId) => {
        const res = await ctx.budgets.fundBudget({ sessionToken: current.token, vaultId, ...input }, ctx.rpc(request));
        return res.replayed ? "fund-replayed" : "funded";
      },
    ),
  );

  app.post(closePath(":vaultId"), async (request, reply) =>
    moneyAction(
      request,
      reply,
      "close",
      (form) => ({ keepFunds: form.get("keep_funds") === "yes" }),
      async (current, { keepFunds }, vaultId) => {
        const res = await ctx.budgets.closeBudget({ sessionToken: current.token, vaultId, keepFunds }, ctx.rpc(request));
        if (res.alreadyClosed) return "already-closed";
        return keepFunds ? "closed-kept" : "closed";
      },
    ),
  );

  app.post(sweepPath(":vaultId"), async (request, reply) =>
    moneyAction(
      request,
      reply,
      "sweep",
      () => ({}),
      async (current, _input, vaultId) => {
        const res = await ctx.budgets.sweepBudget({ sessionToken: current.token, vaultId }, ctx.rpc(request));
        return res.nothingToSweep ? "nothing-to-sweep" : "swept";
      },
    ),
  );

  app.post(revokePath(":agentId", ":grantId"), async (request, reply) => {
    const { agentId, grantId } = request.params as { agentId: string; grantId: string };
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, AGENTS_PATH);
    const noSuchGrant = new PageError(404, "Not found", "There is no such grant.");
    if (!UUID.test(agentId) || !UUID.test(grantId)) throw noSuchGrant;
    // Only a grant of the agent the address names (core checks): the answer is that agent's page, saying it was revoked.
    const agent = agentId.toLowerCase();
    await ctx.grants.revokeUserGrant({ sessionToken: current.token, grantId, agentId: agent }, ctx.rpc(request)).catch((err: unknown) => {
      if (noteRefusal(request, err) === Reason.NOT_FOUND) throw noSuchGrant;
      throw err;
    });
    ctx.notify(reply, `revoked.${agent}`);
    return reply.redirect(agentPath(agent), 303);
  });

  app.post(KILL_SWITCH_PATH, async (request, reply) => {
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, AGENTS_PATH);
    await ctx.grants.killSwitch({ sessionToken: current.token }, ctx.rpc(request));
    ctx.notify(reply, "killed");
    return reply.redirect(AGENTS_PATH, 303);
  });
};
