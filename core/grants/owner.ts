import type { HandlerContext } from "@connectrpc/connect";
import type { GetAgentRequest, KillSwitchRequest, ListAgentsRequest, RevokeUserGrantRequest } from "../../gen/vaultgate/grants/v1/dashboard_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Db } from "../db/knex.js";
import { UUID } from "../../lib/uuid.js";
import type { Outbox } from "../identity/outbox.js";
import type { SessionVerifier } from "../identity/sessions.js";
import { appendAudit, type AuditDeps } from "./audit.js";
import type { CursorCodec } from "../paging.js";
import type { AgentKey, AgentsStore, GrantKey } from "./stores/agents.js";
import type { GrantRecord, GrantsStore } from "./stores/grants.js";
import type { InFlight } from "./stores/budget-grants.js";
import { revoking } from "./revoking.js";

/** The owner's dashboard: the user always comes from the web session token, never from the request. */
export interface OwnerDeps {
  db: Db;
  sessions: SessionVerifier;
  agents: AgentsStore;
  /** Signs the agent list's and agent page's cursors (core/paging.ts). */
  cursors: CursorCodec;
}

/** GetAgent's grants per page: `limit` 0 means this many, and at most MAX_GRANTS_PAGE. */
const GRANTS_PAGE = 50;
const MAX_GRANTS_PAGE = 100;
/** ListAgents' agents per page, likewise; and the newest active grants it shows of each. */
const AGENTS_PAGE = 50;
const MAX_AGENTS_PAGE = 100;
const LISTED_GRANTS = 3;

export interface OwnerRevokeDeps extends AuditDeps {
  db: Db;
  sessions: SessionVerifier;
  grants: GrantsStore;
  /** Tells the owner by mail when the kill switch was used (someone else may hold their session). */
  outbox?: Pick<Outbox, "send">;
  /** Declines the payments and drafts the revoked grants left waiting (revoking.ts). */
  inFlight: InFlight;
}

function grantSummary(g: GrantRecord) {
  return {
    grantId: g.id,
    state: g.state,
    // What the agent can reach: a refresh may take back what its narrower token left out.
    scopes: g.refreshScopes ?? g.scopes,
    vaultId: g.vaultId,
    clientId: g.clientId ?? "",
    createdAt: BigInt(Math.floor(g.issuedAt.getTime() / 1000)),
    expiresAt: BigInt(Math.floor(g.expiresAt.getTime() / 1000)),
    stepUp: g.stepUp,
  };
}

/** GrantsService.ListAgents: a page of the signed-in user's agents, each with its active grants counted and its newest few. */
export async function listAgents(deps: OwnerDeps, req: ListAgentsRequest) {
  const s = await deps.sessions.verify(req.sessionToken);
  if (req.limit > MAX_AGENTS_PAGE) fail(Reason.INVALID_REQUEST, `limit must be 0 or 1 to ${MAX_AGENTS_PAGE}`);
  if (req.agentIds.length > MAX_AGENTS_PAGE) fail(Reason.INVALID_REQUEST, `at most ${MAX_AGENTS_PAGE} agent_ids`);
  if (req.agentIds.length > 0 && req.cursor) fail(Reason.INVALID_REQUEST, "agent_ids takes no cursor");
  // A cursor is bound to this list and the user it was issued for.
  let after: AgentKey | undefined;
  if (req.cursor) {
    const c = deps.cursors.decode(req.cursor);
    if (c?.l !== "agents" || c.u !== s.userId || typeof c.t !== "string" || typeof c.i !== "string" || !UUID.test(c.i))
      fail(Reason.INVALID_CURSOR, "the cursor is not valid");
    after = { at: c.t, id: c.i };
  }
  // Ids that are not ids name no agent of anyone's.
  const ids = req.agentIds.length > 0 ? [...new Set(req.agentIds.filter((id) => UUID.test(id)).map((id) => id.toLowerCase()))] : undefined;
  if (ids?.length === 0) return { agents: [], nextCursor: "" };
  const limit = ids ? MAX_AGENTS_PAGE : req.limit || AGENTS_PAGE;
  const rows = await deps.agents.agentsPage(deps.db, s.userId, { limit: limit + 1, after, ids });
  const page = rows.slice(0, limit);
  const grants = await deps.agents.activeGrantsOf(
    deps.db,
    s.userId,
    page.map((a) => a.agentId),
    LISTED_GRANTS,
  );
  const last = rows.length > limit ? page.at(-1)!.key : undefined;
  return {
    agents: page.map((a) => ({
      agentId: a.agentId,
      displayName: a.displayName,
      clientId: a.clientId,
      activeGrants: grants.get(a.agentId)!.count,
      grants: grants.get(a.agentId)!.newest.map(grantSummary),
    })),
    nextCursor: last ? deps.cursors.encode({ l: "agents", u: s.userId, t: last.at, i: last.id }) : "",
  };
}

/** GrantsService.GetAgent: one of the signed-in user's agents with a page of its grants. */
export async function getAgent(deps: OwnerDeps, req: GetAgentRequest) {
  const s = await deps.sessions.verify(req.sessionToken);
  if (!UUID.test(req.agentId)) fail(Reason.NOT_FOUND, "no such agent");
  if (req.limit > MAX_GRANTS_PAGE) fail(Reason.INVALID_REQUEST, `limit must be 0 or 1 to ${MAX_GRANTS_PAGE}`);
  const agentId = req.agentId.toLowerCase();
  const limit = req.limit || GRANTS_PAGE;
  // A cursor is bound to the agent and the user it was issued for.
  let after: GrantKey | undefined;
  if (req.cursor) {
    const c = deps.cursors.decode(req.cursor);
    if (!c || c.g !== agentId || c.u !== s.userId || (c.s !== 0 && c.s !== 1) || typeof c.t !== "string" || typeof c.i !== "string" || !UUID.test(c.i))
      fail(Reason.INVALID_CURSOR, "the cursor is not valid");
    after = { active: c.s, at: c.t, id: c.i };
  }
  const [a] = await deps.agents.agentsPage(deps.db, s.userId, { limit: 1, ids: [agentId] });
  if (!a) fail(Reason.NOT_FOUND, "no such agent");
  const [rows, active, vaults] = await Promise.all([
    deps.agents.grantsOfAgent(deps.db, s.userId, agentId, { limit: limit + 1, after }),
    deps.agents.activeGrantsOf(deps.db, s.userId, [agentId], 0),
    deps.agents.activeVaultsOf(deps.db, s.userId, agentId),
  ]);
  const page = rows.slice(0, limit);
  const last = rows.length > limit ? page.at(-1)!.key : undefined;
  return {
    agent: {
      agentId: a.agentId,
      displayName: a.displayName,
      clientId: a.clientId,
      activeGrants: active.get(agentId)!.count,
      grants: page.map(grantSummary),
    },
    nextCursor: last ? deps.cursors.encode({ g: agentId, u: s.userId, s: last.active, t: last.at, i: last.id }) : "",
    activeVaultIds: vaults,
  };
}

/** GrantsService.RevokeUserGrant: the owner revokes one of their grants (its whole lineage). */
export async function revokeUserGrant(deps: OwnerRevokeDeps, req: RevokeUserGrantRequest, ctx: HandlerContext) {
  const s = await deps.sessions.verify(req.sessionToken);
  if (!UUID.test(req.grantId)) fail(Reason.NOT_FOUND, "no such grant");
  const g = await deps.grants.findGrant(deps.db, req.grantId.toLowerCase());
  if (!g || g.userId !== s.userId || (req.agentId && g.agentPrincipalId !== req.agentId.toLowerCase())) fail(Reason.NOT_FOUND, "no such grant");
  const revoked = await revoking(deps, ctx, `user:${s.userId}`, async (trx, cancel) => {
    const n = await deps.grants.revokeLineageOfOwner(trx, g, deps.clock(), "user_revocation");
    // What the agent had waiting for approval stops with it: approving it later pays nothing.
    await cancel({ userId: g.userId, lineageId: g.lineageId }, deps.clock());
    await appendAudit(deps, trx, ctx, { actor: `user:${s.userId}`, action: "grant.revoke", subject: g.id });
    return n;
  });
  return { revoked };
}

/** GrantsService.KillSwitch: the owner revokes every grant they ever gave. */
export async function killSwitch(deps: OwnerRevokeDeps, req: KillSwitchRequest, ctx: HandlerContext) {
  const s = await deps.sessions.verify(req.sessionToken);
  const revoked = await revoking(deps, ctx, `user:${s.userId}`, async (trx, cancel) => {
    const n = await deps.grants.revokeAllOfUser(trx, s.userId, deps.clock(), "kill_switch");
    await cancel({ userId: s.userId }, deps.clock());
    await appendAudit(deps, trx, ctx, { actor: `user:${s.userId}`, action: "killSwitch.all", subject: s.userId });
    await deps.outbox?.send(trx, {
      email: s.email,
      subject: "Vaultgate: the kill switch was used",
      body: `Every agent's access to your Vaultgate account was revoked (${n} grant${n === 1 ? "" : "s"}). If it was not you, sign in and check your account at once.`,
      at: deps.clock(),
    });
    return n;
  });
  return { revoked };
}
