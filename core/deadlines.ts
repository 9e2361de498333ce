import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import type { Knex } from "knex";
import { errorDetailOf } from "./errors.js";

/** The signal of a call nothing can abort (an in-process call without a signal or a deadline). */
export const NEVER_ABORTED: AbortSignal = new AbortController().signal;

/** False for no signal and for NEVER_ABORTED: nothing to listen to, so no listener is added. */
export const canAbort = (signal: AbortSignal | undefined): signal is AbortSignal => signal !== undefined && signal !== NEVER_ABORTED;

/**
 * What a call whose caller stopped waiting is answered: DeadlineExceeded when its deadline passed,
 * core's own reason (its shutdown, with an ErrorDetail) as given, else Canceled: a caller's reset
 * stream is its cancel whatever its code (connect-node resets with INTERNAL_ERROR on a deadline).
 */
export function abandoned(signal: AbortSignal, where: string): ConnectError {
  const reason: unknown = signal.reason;
  if (reason instanceof ConnectError && reason.code === Code.DeadlineExceeded) return new ConnectError(`deadline exceeded ${where}`, Code.DeadlineExceeded);
  if (reason instanceof ConnectError && reason.details.length > 0) return reason;
  return new ConnectError(`call cancelled ${where}`, Code.Canceled);
}

/**
 * Throws `abandoned` when the signal is aborted; nothing when there is none. Transactions begun for
 * a caller call it first: knex's transaction() takes no signal, so tarn's abortable acquire is out
 * of reach and a caller who left in the pool's queue is seen once it holds a connection (BEGIN, ROLLBACK).
 */
export function throwIfAbandoned(signal: AbortSignal | undefined, where: string): void {
  if (signal?.aborted) throw abandoned(signal, where);
}

/**
 * Runs no handler for a call whose deadline passed (a zero one included) or whose caller left
 * before it would start: nothing is written or derived for a caller who no longer waits.
 */
export function refuseAbandonedCalls(): Interceptor {
  return (next) => (req) => {
    if (req.signal.aborted) throw abandoned(req.signal, "before the call started");
    return next(req);
  };
}

/**
 * db.transaction for a caller's write: the caller's signal is checked first inside it, so one who
 * left while the call waited for a connection (knex offers no abortable acquire) has nothing written.
 */
export function callerTransaction<T>(db: Knex, signal: AbortSignal, where: string, work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  return db.transaction(async (trx) => {
    throwIfAbandoned(signal, where);
    return work(trx);
  });
}

/** True when `err` is the caller's own departure (its signal aborted, no domain refusal): nothing to audit or remap. */
export const leftWhileWaiting = (signal: AbortSignal, err: unknown): boolean => signal.aborted && errorDetailOf(err) === undefined;

/**
 * A change's kind for a caller who left while it waited: "creates" (it creates or grants something)
 * writes nothing then; "may-end" (it may end or narrow access) always goes on.
 */
export type ChangeKind = "creates" | "may-end";

/** db.transaction for a change of `kind`: callerTransaction for "creates", a plain one for "may-end". */
export function changeTransaction<T>(db: Knex, signal: AbortSignal, kind: ChangeKind, where: string, work: (trx: Knex.Transaction) => Promise<T>): Promise<T> {
  return kind === "creates" ? callerTransaction(db, signal, where, work) : db.transaction(work);
}
