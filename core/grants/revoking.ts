import type { HandlerContext } from "@connectrpc/connect";
import type { Knex } from "knex";
import type { Db } from "../db/knex.js";
import type { InFlight, RevokedGrants } from "./stores/budget-grants.js";

export interface RevokingDeps {
  db: Db;
  inFlight: InFlight;
}

/** Cancels what the grants a revoking transaction revoked left open; call it in that transaction after revoking. */
export type Cancel = (revoked: RevokedGrants, at: Date) => Promise<void>;

/**
 * Runs a transaction that revokes grants: `work` cancels what they left open (payments declined,
 * drafts marked); once it commits, those drafts are declined in transactions of their own, since
 * budget rows are locked before grants and the revoke already holds grant locks.
 */
export async function revoking<T>(
  deps: RevokingDeps,
  ctx: Pick<HandlerContext, "values">,
  actor: string,
  work: (trx: Knex.Transaction, cancel: Cancel) => Promise<T>,
): Promise<T> {
  const drafts: string[] = [];
  const out = await deps.db.transaction((trx) =>
    work(trx, async (revoked, at) => {
      drafts.push(...(await deps.inFlight.cancel(trx, revoked, at)));
    }),
  );
  if (drafts.length > 0) await deps.inFlight.endDrafts(drafts, actor, ctx);
  return out;
}
