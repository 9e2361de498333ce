import type { HandlerContext } from "@connectrpc/connect";
import type { Knex } from "knex";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { kRequestId } from "../context.js";
import type { SessionVerifier } from "../identity/sessions.js";
import { UUID } from "../uuid.js";
import type { AuditDeps } from "./caller.js";

export interface OwnerDecisionBase extends AuditDeps {
  sessions: SessionVerifier;
}

/** One decision the owner makes on a record of theirs (a draft budget, a payment awaiting step-up). */
export interface OwnerDecision<R extends { userId: string }> {
  sessionToken: string;
  /** Set when the decision needs a fresh step-up: the refusal's message. */
  stepUp?: string;
  /** The id the caller sent; a malformed one is refused like an unknown one (and never reaches a uuid column). */
  rawId: string;
  /** "no such <noun>" is the refusal for a record that is missing or someone else's. */
  noun: string;
  /** The record, locked: the row lock orders concurrent decisions on it, so one of them decides. */
  find: (trx: Knex.Transaction, id: string) => Promise<R | undefined>;
  /** Refuses a record in the wrong state, or says whether it is already decided ("done": answered as it is). */
  state: (record: R) => "decide" | "done";
  /** Writes the decision and answers the record as it now is. */
  decide: (trx: Knex.Transaction, record: R, now: Date) => Promise<R>;
  action: string;
  subject: (record: R) => string;
}

/** Resolves the owner's session, checks the record is theirs and undecided, then writes the decision and its audit row in one transaction. */
export async function ownerDecision<R extends { userId: string }>(deps: OwnerDecisionBase, ctx: HandlerContext, d: OwnerDecision<R>): Promise<R> {
  const now = deps.clock();
  const owner = await deps.sessions.verify(d.sessionToken);
  if (d.stepUp !== undefined && !owner.stepUpFresh) fail(Reason.ACCESS_DENIED, d.stepUp);
  if (!UUID.test(d.rawId)) fail(Reason.NOT_FOUND, `no such ${d.noun}`);
  return deps.db.transaction(async (trx) => {
    const record = await d.find(trx, d.rawId.toLowerCase());
    if (!record || record.userId !== owner.userId) fail(Reason.NOT_FOUND, `no such ${d.noun}`);
    if (d.state(record) === "done") return record;
    const decided = await d.decide(trx, record, now);
    await deps.audit.append(trx, {
      requestId: ctx.values.get(kRequestId),
      actor: `user:${owner.userId}`,
      action: d.action,
      outcome: "success",
      subject: d.subject(record),
      at: now,
    });
    return decided;
  });
}
