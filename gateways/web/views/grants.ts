import type { AgentSummary, GrantSummary } from "../../../gen/vaultgate/grants/v1/dashboard_pb.js";
import { AGENT_SCOPE_WORDS } from "../../shared/public-urls.js";
import { isolated } from "../../../lib/text.js";
import { utcMinute } from "../format.js";
import { pageLink, type ListCursors } from "../page-links.js";
import { agentPath, revokePath } from "../paths.js";
import { html, type Html } from "./html.js";

/**
 * One page of the agent's grants (core lists the active ones first), with links to the next and
 * the first page that keep the page's other lists (`keep`) where they are.
 */
export function grantsSection(a: AgentSummary, csrf: string, paging: { here: string; first: boolean; next: string; keep: ListCursors }): Html {
  const active = a.grants.filter((g) => g.state === "active");
  const past = a.grants.filter((g) => g.state !== "active");
  const row = (g: GrantSummary, revoke: boolean) =>
    html`<tr><td><span title="${g.grantId}">Grant <code>${g.grantId.slice(0, 8)}</code></span><br><span class="muted">${utcMinute(g.createdAt)}${g.stepUp ? " · step-up" : ""}<br>vault ${g.vaultId.slice(0, 8)}</span></td>
      <td>${g.scopes.map((s) => html`<div>${AGENT_SCOPE_WORDS[s] ?? s}</div>`)}</td>
      <td>${
        revoke
          ? html`<form method="post" action="${revokePath(a.agentId, g.grantId)}"><input type="hidden" name="csrf" value="${csrf}"><button type="submit" class="danger">Revoke</button></form>`
          : g.state
      }</td></tr>`;
  const links = [
    paging.next ? html`<a href="${pageLink(paging.here, { ...paging.keep, grants: paging.next })}">Older grants</a>` : "",
    paging.first ? "" : html`<a href="${pageLink(paging.here, paging.keep)}">Newest grants</a>`,
  ].filter(Boolean);
  return html`${paging.first || active.length ? html`<h2>Active grants</h2>` : ""}
    ${paging.first || active.length ? html`<section class="card">${active.length ? html`<table>${active.map((g) => row(g, true))}</table>` : html`<p class="muted">No active grants.</p>`}</section>` : ""}
    ${past.length ? html`<h2>Earlier grants</h2><section class="card"><table>${past.map((g) => row(g, false))}</table></section>` : ""}
    ${links.length ? html`<p class="grants-pages">${links.map((l, i) => html`${i ? " · " : ""}${l}`)}</p>` : ""}`;
}

/** One page of the user's agents, with links to the next and the first page that keep the page's other lists where they are. */
export function agentsSection(agents: AgentSummary[], paging: { here: string; first: boolean; next: string; keep: ListCursors }): Html {
  const list = agents.length
    ? html`<ul>${agents.map(
        (a) =>
          html`<li><a href="${agentPath(a.agentId)}">${isolated(a.displayName)}</a> <span class="muted">— ${a.activeGrants} active grant${a.activeGrants === 1 ? "" : "s"}</span></li>`,
      )}</ul>`
    : html`<p class="muted">${paging.first ? "No agent has asked for access yet." : "No more agents."}</p>`;
  const links = [
    paging.next ? html`<a rel="next" href="${pageLink(paging.here, { ...paging.keep, agents: paging.next })}">More agents</a>` : "",
    paging.first ? "" : html`<a href="${pageLink(paging.here, { ...paging.keep, agents: "" })}">First agents</a>`,
  ].filter(Boolean);
  return html`<section class="card">${list}${links.length ? html`<p class="pager">${links.map((l, i) => html`${i ? " · " : ""}${l}`)}</p>` : ""}</section>`;
}
