import type { HandlerContext } from "@connectrpc/connect";
import type { Knex } from "knex";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { callFacts } from "../context.js";
import { callerTransaction } from "../deadlines.js";
import type { SessionVerifier } from "../identity/sessions.js";
import { UUID } from "../../lib/uuid.js";
import type { AuditDeps } from "./caller.js";

export interface OwnerDecisionBase extends AuditDeps {
  sessions: SessionVerifier;
}

/** A kind of record the owner decides on (a draft budget, a payment awaiting step-up), as the caller named it. */
export interface OwnedRecord<R extends { userId: string }> {
  /** The id the caller sent; a malformed one is refused like an unknown one (and never reaches a uuid column). */
  rawId: string;
  /** "no such <noun>" is the refusal for a record that is missing or someone else's. */
  noun: string;
  /** The record, locked: the row lock orders concurrent decisions on it, so one of them decides. */
  find: (trx: Knex.Transaction, id: string) => Promise<R | undefined>;
  /** What the audit row names. */
  subject: (record: R) => string;
}

/** One decision on such a record. */
export interface OwnerDecision<R> {
  /** Set when the decision needs a fresh step-up: the refusal's message. */
  stepUp?: string;
  /** Refuses a record in the wrong state, or says whether it is already decided ("done": answered as it is). */
  state: (record: R) => "decide" | "done";
  /** Writes the decision and answers the record as it now is. */
  decide: (trx: Knex.Transaction, record: R, now: Date) => Promise<R>;
  action: string;
}

/** The state rule of every decline: declining again answers the record as it is; one no longer `waiting` is refused. */
export const declining =
  (waiting: string, noun: string) =>
  (record: { status: string }): "decide" | "done" => {
    if (record.status === "declined") return "done";
    if (record.status !== waiting) fail(Reason.NOT_FOUND, `the ${noun} is no longer waiting for approval`);
    return "decide";
  };

/** Resolves the owner's session, checks the record is theirs and undecided, then writes the decision and its audit row in one transaction. */
export async function ownerDecision<R extends { userId: string }>(
  deps: OwnerDecisionBase,
  ctx: HandlerContext,
  sessionToken: string,
  of: OwnedRecord<R>,
  d: OwnerDecision<R>,
): Promise<R> {
  const now = deps.clock();
  const owner = await deps.sessions.verify(sessionToken);
  if (d.stepUp !== undefined && !owner.stepUpFresh) fail(Reason.ACCESS_DENIED, d.stepUp);
  if (!UUID.test(of.rawId)) fail(Reason.NOT_FOUND, `no such ${of.noun}`);
  return callerTransaction(deps.db, ctx.signal, `before ${d.action} began`, async (trx) => {
    const record = await of.find(trx, of.rawId.toLowerCase());
    if (!record || record.userId !== owner.userId) fail(Reason.NOT_FOUND, `no such ${of.noun}`);
    if (d.state(record) === "done") return record;
    const decided = await d.decide(trx, record, now);
    await deps.audit.append(trx, {
      ...callFacts(ctx),
      actor: `user:${owner.userId}`,
      action: d.action,
      outcome: "success",
      subject: of.subject(record),
      at: now,
    });
    return decided;
  });
}
