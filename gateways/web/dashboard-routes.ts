import type { FastifyInstance, FastifyRequest } from "fastify";
import type { GrantSummary } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { AGENT_SCOPE_WORDS } from "../shared/public-urls.js";
import { html } from "./html.js";
import { PageError, type WebContext } from "./plugin.js";
import { loadPending, paymentPath, pendingSection } from "./approval-routes.js";
import { UUID } from "../shared/uuid.js";

/** Fixed notices selected by a query flag; the flag's value is never echoed. */
const NOTICES: Record<string, string> = {
  revoked: "The grant was revoked. Calls with its tokens are refused from now on.",
  killed: "Every grant was revoked. All agents have lost access.",
  "payment-approved": "The payment was approved. It completes when the agent repeats its request.",
  "budget-activated": "The budget is active. Its agent can now spend within its limits.",
  "payment-declined": "The payment was declined. It will not be paid.",
  "budget-declined": "The budget was declined. It can never be activated.",
};

const when = (unixSeconds: bigint) => new Date(Number(unixSeconds) * 1000).toISOString().replace("T", " ").slice(0, 16) + " UTC";

/** {app_url}/dashboard/agents and /dashboard/agents/<agent_id> (spec 3.2, DESIGN 4.2). */
export async function dashboardRoutes(app: FastifyInstance, ctx: WebContext) {
  const notice = (request: FastifyRequest) => {
    const done = (request.query as Record<string, unknown>).done;
    return typeof done === "string" && NOTICES[done] ? html`<div class="card ok"><p>${NOTICES[done]}</p></div>` : html``;
  };

  app.get("/dashboard", async (_request, reply) => reply.redirect("/dashboard/agents", 303));

  /**
   * A payment's step_up_url is `/dashboard/agents[/<agent_id>]?payment=<id>` (core); it
   * leads to the payment's review page, whatever the agent segment says.
   */
  const paymentLink = (request: FastifyRequest): string | undefined => {
    const id = (request.query as Record<string, unknown>).payment;
    if (id === undefined) return undefined;
    if (typeof id !== "string" || !UUID.test(id)) {
      throw new PageError(404, "Nothing to approve here", "There is no payment waiting for your approval at this address. It may have been approved already, or the link is wrong.");
    }
    return paymentPath(id.toLowerCase());
  };

  app.get("/dashboard/agents", async (request, reply) => {
    const link = paymentLink(request);
    if (link) return reply.redirect(link, 303);
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, "/dashboard/agents");
    const csrf = ctx.csrfToken(request, reply);
    const { agents } = await ctx.grants.listAgents({ sessionToken: current.token }, ctx.rpc(request));
    const pending = await loadPending(ctx, request, current, agents);
    const list = agents.length
      ? html`<ul>${agents.map(
          (a) => html`<li><a href="/dashboard/agents/${a.agentId}">${a.displayName}</a> <span class="muted">— ${a.activeGrants} active grant${a.activeGrants === 1 ? "" : "s"}</span></li>`,
        )}</ul>`
      : html`<p class="muted">No agent has asked for access yet.</p>`;
    return ctx.send(
      reply,
      200,
      "Your agents",
      html`${notice(request)}
      <section class="card">${list}</section>
      <h2>Pending approvals</h2>
      ${pendingSection(pending, csrf)}
      <h2>Kill switch</h2>
      <form class="card" method="post" action="/dashboard/kill-switch">
        <p>Revoke every grant of every agent at once. Agents must ask again.</p>
        <input type="hidden" name="csrf" value="${csrf}">
        <button type="submit" class="danger">Revoke all access</button>
      </form>`,
      { email: current.session.email, csrf },
    );
  });

  app.get("/dashboard/agents/:agentId", async (request, reply) => {
    const { agentId } = request.params as { agentId: string };
    const link = paymentLink(request);
    if (link) return reply.redirect(link, 303);
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, UUID.test(agentId) ? `/dashboard/agents/${agentId}` : "/dashboard/agents");
    if (!UUID.test(agentId)) throw new PageError(404, "Not found", "There is no such agent.");
    const csrf = ctx.csrfToken(request, reply);
    const { agent } = await ctx.grants.getAgent({ sessionToken: current.token, agentId }, ctx.rpc(request));
    const a = agent!;
    // DESIGN 4.2: this agent's own pending approvals, with the same review links and Decline buttons.
    const all = await loadPending(ctx, request, current);
    const mine = { ...all, payments: all.payments.filter((p) => p.agentPrincipalId === a.agentId), budgets: all.budgets.filter((b) => b.agentPrincipalId === a.agentId) };
    const active = a.grants.filter((g) => g.state === "active");
    const past = a.grants.filter((g) => g.state !== "active").slice(0, 20);
    const row = (g: GrantSummary, revoke: boolean) =>
      html`<tr><td><span title="${g.grantId}">Grant <code>${g.grantId.slice(0, 8)}</code></span><br><span class="muted">${when(g.createdAt)}${g.stepUp ? " · step-up" : ""}<br>vault ${g.vaultId.slice(0, 8)}</span></td>
        <td>${g.scopes.map((s) => html`<div>${AGENT_SCOPE_WORDS[s] ?? s}</div>`)}</td>
        <td>${revoke
          ? html`<form method="post" action="/dashboard/agents/${a.agentId}/grants/${g.grantId}/revoke"><input type="hidden" name="csrf" value="${csrf}"><button type="submit" class="danger">Revoke</button></form>`
          : g.state}</td></tr>`;
    return ctx.send(
      reply,
      200,
      a.displayName,
      html`${notice(request)}
      <p class="muted">Agent <code>${a.agentId}</code>${a.clientId ? html` · client <code>${a.clientId}</code>` : ""}</p>
      <h2>Active grants</h2>
      <section class="card">${active.length ? html`<table>${active.map((g) => row(g, true))}</table>` : html`<p class="muted">No active grants.</p>`}</section>
      ${past.length ? html`<h2>Earlier grants</h2><section class="card"><table>${past.map((g) => row(g, false))}</table></section>` : ""}
      <h2>Pending approvals</h2>
      ${pendingSection(mine, csrf)}
      <p><a href="/dashboard/agents">All agents</a></p>`,
      { email: current.session.email, csrf },
    );
  });

  app.post("/dashboard/agents/:agentId/grants/:grantId/revoke", async (request, reply) => {
    const { agentId, grantId } = request.params as { agentId: string; grantId: string };
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, "/dashboard/agents");
    if (!UUID.test(agentId) || !UUID.test(grantId)) throw new PageError(404, "Not found", "There is no such grant.");
    await ctx.grants.revokeUserGrant({ sessionToken: current.token, grantId }, ctx.rpc(request));
    return reply.redirect(`/dashboard/agents/${agentId}?done=revoked`, 303);
  });

  app.post("/dashboard/kill-switch", async (request, reply) => {
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, "/dashboard/agents");
    await ctx.grants.killSwitch({ sessionToken: current.token }, ctx.rpc(request));
    return reply.redirect("/dashboard/agents?done=killed", 303);
  });
}
