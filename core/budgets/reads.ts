import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type {
  GetBalanceRequest,
  GetBalanceResponseSchema,
  ListGrantAuditRequest,
  ListGrantAuditResponseSchema,
} from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { auditCursor, auditSince } from "../audit/records.js";
import type { BudgetGrantsStore } from "../grants/stores/budget-grants.js";
import { formatWatermark, type CursorCodec } from "../paging.js";
import { actorOf, auditOutside, claimsFor, SCOPES, usable, type AuditDeps, type TokenDeps } from "./caller.js";
import type { VaultsStore } from "./stores/vaults.js";

export interface BalanceDeps extends AuditDeps, TokenDeps {
  grants: BudgetGrantsStore;
  vaults: VaultsStore;
}

export interface GrantAuditDeps extends AuditDeps, TokenDeps {
  grants: BudgetGrantsStore;
  cursors: CursorCodec;
}

const MAX_AUDIT_LIMIT = 500;

/** BudgetsService.GetBalance: the balance of the calling grant's vault. */
export async function getBalance(deps: BalanceDeps, req: GetBalanceRequest, ctx: HandlerContext): Promise<MessageInitShape<typeof GetBalanceResponseSchema>> {
  const claims = await claimsFor(deps, req.accessToken, SCOPES.accountsRead);
  const g = usable(deps, await deps.grants.findGrant(deps.db, claims.jti));
  const vault = await deps.vaults.findVault(deps.db, g.vaultId);
  if (!vault || vault.ownerUserId !== g.userId) fail(Reason.GRANT_REQUIRED, "the grant's vault is not available");
  // A read is withheld when its audit row cannot be written.
  await auditOutside(deps, ctx, actorOf(g), "accounts.balance", "success", "", vault.id);
  return { vaultId: vault.id, balanceCents: BigInt(vault.balanceCents), currency: vault.currency };
}

/** BudgetsService.ListGrantAudit: the calling agent's own audit feed, paged. */
export async function listGrantAudit(
  deps: GrantAuditDeps,
  req: ListGrantAuditRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof ListGrantAuditResponseSchema>> {
  const { audit, cursors } = deps;
  const claims = await claimsFor(deps, req.accessToken, SCOPES.auditStream);
  const g = usable(deps, await deps.grants.findGrant(deps.db, claims.jti));
  const limit = req.limit === 0 ? 100 : req.limit;
  if (limit > MAX_AUDIT_LIMIT) fail(Reason.INVALID_REQUEST, `limit must be 1 to ${MAX_AUDIT_LIMIT}`);
  const actor = actorOf(g);
  // Feed positions (core/paging.ts): a watermark, or a record_id of this actor's feed.
  if (req.cursor && req.since) fail(Reason.INVALID_REQUEST, "send cursor or since, not both");
  let after = await auditSince(audit, req.since, actor);
  // A cursor is bound to the actor it was issued for.
  if (req.cursor) after = auditCursor(cursors, req.cursor, { w: actor });
  const rows = await audit.list({ after, limit: limit + 1, actor });
  const page = rows.slice(0, limit);
  const last = page.at(-1)?.position;
  // A read is withheld when its audit row cannot be written. Its actor is not the
  // stream's own, so polling the stream never feeds it (each poll would list the last).
  await auditOutside(deps, ctx, `${actor}:audit-reader`, "audit.list", "success", "", g.id);
  return {
    records: page.map(({ row: r }) => ({
      recordId: String(r.seq),
      action: r.action,
      outcome: r.outcome,
      reason: r.reason,
      subject: r.subject,
      createdAt: timestampFromDate(r.createdAt),
    })),
    nextCursor: rows.length > limit && last ? cursors.encode({ a: last.seq, x: last.xid, w: actor }) : "",
    watermark: formatWatermark(last ?? after),
  };
}
