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
import type { AgentsStore, GrantKey } from "./stores/agents.js";
import type { GrantRecord, GrantsStore } from "./stores/grants.js";
import type { InFlight } from "./stores/budget-grants.js";
import { revoking } from "./revoking.js";

/** The owner's dashboard: the user always comes from the web session token, never from the request. */
export interface OwnerDeps {
  db: Db;
  sessions: SessionVerifier;
  agents: AgentsStore;
  /** Signs the agent page's grant cursors (core/paging.ts). */
  cursors: CursorCodec;
}

/** GetAgent's grants per page: `limit` 0 means this many, and at most MAX_GRANTS_PAGE. */
const GRANTS_PAGE = 50;
const MAX_GRANTS_PAGE = 100;

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

/** GrantsService.ListAgents: the signed-in user's agents with their active grants. */
export async function listAgents(deps: OwnerDeps, req: ListAgentsRequest) {
  const s = await deps.sessions.verify(req.sessionToken);
  const agents = await deps.agents.agentsOfUser(deps.db, s.userId);
  return {
    agents: agents.map((a) => ({
      agentId: a.agentId,
      displayName: a.displayName,
      clientId: a.clientId,
      activeGrants: a.grants.length,
      grants: a.grants.map(grantSummary),
    })),
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
  const [a] = await deps.agents.agentsOfUser(deps.db, s.userId, agentId);
  if (!a) fail(Reason.NOT_FOUND, "no such agent");
  const rows = await deps.agents.grantsOfAgent(deps.db, s.userId, agentId, { limit: limit + 1, after });
  const page = rows.slice(0, limit);
  const last = rows.length > limit ? page.at(-1)!.key : undefined;
  return {
    agent: {
      agentId: a.agentId,
      displayName: a.displayName,
      clientId: a.clientId,
      activeGrants: a.grants.length,
      grants: page.map(grantSummary),
    },
    nextCursor: last ? deps.cursors.encode({ g: agentId, u: s.userId, s: last.active, t: last.at, i: last.id }) : "",
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
