/** PartnerResourcesService.SetUserEmail: the operator's fix for a user's e-mail address. */

import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { SetUserEmailRequest, SetUserEmailResponseSchema } from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { canonicalEmail, storedEmailSpellings } from "../../lib/email.js";
import { fail } from "../errors.js";
import type { UsersStore } from "../identity/users-store.js";
import { endSignIns, type EndSignInsDeps } from "../identity/account-changes.js";
import { adminChange, lockUser, type AdminChangeDeps } from "./resources-changes.js";

/** What PartnerResourcesService.SetUserEmail needs. */
export interface SetUserEmailDeps extends AdminChangeDeps, EndSignInsDeps {
  users: Pick<UsersStore, "lockUser" | "setEmail">;
}

/**
 * Gives a user a new address under the current rule, unique in any case or spelling. Codes mailed
 * to the old address stop working, unsent ones are dropped, and the user's web sessions end: the
 * old mailbox may be someone else's. The audit row names the user, not the addresses.
 */
export async function setUserEmail(
  deps: SetUserEmailDeps,
  req: SetUserEmailRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof SetUserEmailResponseSchema>> {
  const email = canonicalEmail(req.email) ?? fail(Reason.INVALID_REQUEST, "email must be an e-mail address");
  return adminChange(deps, ctx, "may-end", "user.set_email", req.userId, async (trx) => {
    const { id } = await lockUser(deps, trx, req.userId);
    const changed = await deps.users.setEmail(trx, id, email, storedEmailSpellings(email));
    if (changed === "taken") fail(Reason.INVALID_REQUEST, "another user already has this e-mail address");
    if (changed.previous === email) return { userId: id, email, previousEmail: email, sessionsEnded: 0 };
    const sessionsEnded = await endSignIns(deps, trx, { id, email: changed.previous }, deps.clock());
    return { userId: id, email, previousEmail: changed.previous, sessionsEnded };
  });
}
