import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import type { WebSession } from "../../../gen/vaultgate/grants/v1/signin_pb.js";
import { noteRefusal } from "../../request-log.js";
import { UUID } from "../../../lib/uuid.js";
import { PageError, type Current, type WebContext } from "../context.js";
import { isolated } from "../../../lib/text.js";
import { money, utcMinute } from "../format.js";
import { loadPending } from "../load-pending.js";
import { AGENTS_PATH, budgetPath, paymentPath, stepUpPath } from "../paths.js";
import { html } from "../views/html.js";
import { limitWords, paymentWords } from "../views/pending.js";

/** Pending payment review and approval, draft budget review and activation. */
export const approvalRoutes: FastifyPluginAsync<{ ctx: WebContext }> = async (app, { ctx }) => {
  /** Unknown, malformed, already decided and another user's items all get this one page. */
  const nothing = (what: "payment" | "budget") =>
    new PageError(
      404,
      "Nothing to approve here",
      `There is no ${what} waiting for your approval at this address. It may have been approved already, or the link is wrong.`,
    );

  const stepUpNote = (s: WebSession) =>
    s.stepUpFresh
      ? html`<p class="muted">You confirmed it's you a moment ago.</p>`
      : html`<p class="muted">Before it takes effect we will ask you to confirm it's you.</p>`;

  /** Signed out, any id is the sign-in page (back here, or to the agents list for an id that names nothing). */
  async function signedIn(request: FastifyRequest, reply: FastifyReply, id: string, here: string): Promise<Current | undefined> {
    const current = await ctx.session(request);
    if (!current) ctx.signInRedirect(reply, UUID.test(id) ? here : AGENTS_PATH);
    return current;
  }

  /** Core refuses a stale step-up with ACCESS_DENIED: back through the step-up page. */
  async function approve(reply: FastifyReply, here: string, call: () => Promise<unknown>, notice: string) {
    try {
      await call();
    } catch (err) {
      if (noteRefusal(reply.request, err) === Reason.ACCESS_DENIED) return reply.redirect(stepUpPath(here), 303);
      throw err;
    }
    ctx.notify(reply, notice);
    return reply.redirect(AGENTS_PATH, 303);
  }

  app.get(paymentPath(":paymentId"), async (request, reply) => {
    const { paymentId } = request.params as { paymentId: string };
    const here = paymentPath(paymentId);
    const current = await signedIn(request, reply, paymentId, here);
    if (!current) return reply;
    if (!UUID.test(paymentId)) throw nothing("payment");
    const pending = await loadPending(ctx, request, current, { paymentId: paymentId.toLowerCase() });
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
          <tr><th>Asked</th><td>${utcMinute(p.createdAt)}</td></tr>
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
        <p>Not expected? Decline it: it will never be paid, and the agent's repeated request is refused. You can also revoke the agent's access from <a href="${AGENTS_PATH}">your agents</a>.</p>
        <input type="hidden" name="csrf" value="${csrf}">
        <button type="submit" class="secondary">Decline payment</button>
      </form>`,
      { email: current.session.email, csrf },
    );
  });

  app.post(`${paymentPath(":paymentId")}/approve`, async (request, reply) => {
    const { paymentId } = request.params as { paymentId: string };
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const here = paymentPath(paymentId);
    const current = await signedIn(request, reply, paymentId, here);
    if (!current) return reply;
    if (!UUID.test(paymentId)) throw nothing("payment");
    if (!current.session.stepUpFresh) return reply.redirect(stepUpPath(here), 303);
    const call = () =>
      ctx.budgets.approvePayment({ sessionToken: current.token, paymentId }, ctx.rpc(request)).catch((err: unknown) => {
        if (noteRefusal(request, err) === Reason.NOT_FOUND) throw nothing("payment");
        throw err;
      });
    return approve(reply, here, call, "payment-approved");
  });

  /**
   * Declining needs the session and the CSRF token but no step-up (it only takes a
   * possibility away). Core makes it idempotent; anything not pending is the 404 page.
   */
  async function decline(request: FastifyRequest, reply: FastifyReply, what: "payment" | "budget", id: string, call: (current: Current) => Promise<unknown>) {
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const current = await signedIn(request, reply, id, what === "payment" ? paymentPath(id) : budgetPath(id));
    if (!current) return reply;
    if (!UUID.test(id)) throw nothing(what);
    try {
      await call(current);
    } catch (err) {
      if (noteRefusal(request, err) === Reason.NOT_FOUND) throw nothing(what);
      throw err;
    }
    ctx.notify(reply, `${what}-declined`);
    return reply.redirect(AGENTS_PATH, 303);
  }

  app.post(`${paymentPath(":paymentId")}/decline`, async (request, reply) => {
    const { paymentId } = request.params as { paymentId: string };
    return decline(request, reply, "payment", paymentId, (current) => ctx.budgets.declinePayment({ sessionToken: current.token, paymentId }, ctx.rpc(request)));
  });

  app.post(`${budgetPath(":agentId")}/decline`, async (request, reply) => {
    const { agentId } = request.params as { agentId: string };
    return decline(request, reply, "budget", agentId, (current) =>
      ctx.budgets.declineBudget({ sessionToken: current.token, agentPrincipalId: agentId }, ctx.rpc(request)),
    );
  });

  app.get(budgetPath(":agentId"), async (request, reply) => {
    const { agentId } = request.params as { agentId: string };
    const here = budgetPath(agentId);
    const current = await signedIn(request, reply, agentId, here);
    if (!current) return reply;
    if (!UUID.test(agentId)) throw nothing("budget");
    const pending = await loadPending(ctx, request, current, { agentId: agentId.toLowerCase() });
    const b = pending.budgets.find((x) => x.agentPrincipalId === agentId.toLowerCase());
    if (!b) throw nothing("budget");
    const csrf = ctx.csrfToken(request, reply);
    return ctx.send(
      reply,
      200,
      "Activate this budget?",
      html`<section class="card">
        <p>An agent asked for a new budget <strong>${isolated(b.displayName)}</strong>: its own agent and vault under yours, with these limits:</p>
        <ul>${limitWords(b).map((w) => html`<li>${w}</li>`)}</ul>
        <p class="muted">Agent <code>${b.agentPrincipalId}</code> · vault <code>${b.vaultId}</code>${b.createdAt ? html` · asked ${utcMinute(b.createdAt)}` : ""}</p>
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
      <p><a href="${AGENTS_PATH}">All agents</a></p>`,
      { email: current.session.email, csrf },
    );
  });

  app.post(`${budgetPath(":agentId")}/activate`, async (request, reply) => {
    const { agentId } = request.params as { agentId: string };
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const here = budgetPath(agentId);
    const current = await signedIn(request, reply, agentId, here);
    if (!current) return reply;
    if (!UUID.test(agentId)) throw nothing("budget");
    if (!current.session.stepUpFresh) return reply.redirect(stepUpPath(here), 303);
    const call = () =>
      ctx.budgets.activateBudget({ sessionToken: current.token, agentPrincipalId: agentId }, ctx.rpc(request)).catch((err: unknown) => {
        if (noteRefusal(request, err) === Reason.NOT_FOUND) throw nothing("budget");
        throw err;
      });
    return approve(reply, here, call, "budget-activated");
  });
};
