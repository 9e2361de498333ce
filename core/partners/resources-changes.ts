/** The operator-change helpers shared by the partner admin and resource handlers. */

import type { HandlerContext } from "@connectrpc/connect";
import type { Knex } from "knex";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { callFacts } from "../context.js";
import { changeTransaction, type ChangeKind } from "../deadlines.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { UsersStore } from "../identity/users-store.js";
import { UUID } from "../../lib/uuid.js";
import type { ConsentScope } from "../../lib/vocabulary.js";
import type { ResourcesStore } from "./resources-store.js";
import { enqueue, type EventType } from "./webhooks/outbox-store.js";

/** What an operator change and its audit row need. */
export interface AdminChangeDeps {
  db: Db;
  audit: Pick<AuditStore, "append">;
  clock: () => Date;
}

/** What locking a user by id needs. */
export interface LockUserDeps {
  users: Pick<UsersStore, "lockUser">;
}

/** What emitting a user's event to the partners that may see it needs. */
export interface EmitDeps {
  resources: Pick<ResourcesStore, "partnersConsenting">;
  clock: () => Date;
}

/** Admin mutation in one transaction with its audit row. */
export async function adminChange<T>(
  deps: AdminChangeDeps,
  ctx: HandlerContext,
  kind: ChangeKind,
  action: string,
  subject: string,
  work: (trx: Knex.Transaction) => Promise<T>,
) {
  const change = async (trx: Knex.Transaction) => {
    const result = await work(trx);
    await deps.audit.append(trx, { ...callFacts(ctx), actor: "admin", action, outcome: "success", subject, at: deps.clock() });
    return result;
  };
  return changeTransaction(deps.db, ctx.signal, kind, `before ${action} began`, change);
}

/** A user held by lockUser until the transaction ends: the status read cannot change under it. */
export type LockedUser = Awaited<ReturnType<typeof lockUser>>;

export async function lockUser(deps: LockUserDeps, trx: Knex.Transaction, userId: string) {
  if (!UUID.test(userId)) fail(Reason.INVALID_REQUEST, "user_id must be a UUID");
  const user = await deps.users.lockUser(trx, userId);
  if (!user) fail(Reason.NOT_FOUND, "no such user");
  return user;
}

/** Emits one event per partner entitled to and consented `scope`, in partner id order; none for an inactive user (`user` as lockUser read it). */
export async function emit(deps: EmitDeps, trx: Knex.Transaction, user: LockedUser, scope: ConsentScope, type: EventType, data: Record<string, unknown>) {
  if (user.status !== "active") return;
  for (const partnerId of await deps.resources.partnersConsenting(trx, user.id, scope)) await enqueue(trx, partnerId, type, data, deps.clock());
}
