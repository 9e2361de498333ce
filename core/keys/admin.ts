import type { HandlerContext } from "@connectrpc/connect";
import type { RetireSigningKeyRequest } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { AuditStore } from "../audit/store.js";
import { callFacts } from "../context.js";
import { KeyringError, type KeyChangeRecorder, type Keyring } from "./keyring.js";

export interface KeyAdminDeps {
  keyring: Keyring;
  audit: AuditStore;
  clock: () => Date;
}

/** The audit row of a key change, appended in the keyring's own transaction. */
function auditKeyChange(deps: KeyAdminDeps, ctx: HandlerContext, action: string): KeyChangeRecorder {
  return (trx, c) =>
    deps.audit.append(trx, {
      ...callFacts(ctx),
      outcome: "success",
      actor: "admin",
      action,
      subject: c.kid,
      at: deps.clock(),
    });
}

/** GrantsService.GetJwks: the public keys tokens may be verified with. */
export async function getJwks(deps: Pick<KeyAdminDeps, "keyring">) {
  return { jwksJson: JSON.stringify(await deps.keyring.jwks()) };
}

/** GrantsService.RotateSigningKey: a new current key; the previous one stays published until retired. */
export async function rotateSigningKey(deps: KeyAdminDeps, _req: unknown, ctx: HandlerContext) {
  try {
    // The audit row is written in the transaction that publishes the new key.
    const rotated = await deps.keyring.rotate(auditKeyChange(deps, ctx, "keys.rotate"));
    return { kid: rotated.kid, publishedKids: rotated.publishedKids };
  } catch (err) {
    if (err instanceof KeyringError) fail(Reason.INVALID_REQUEST, err.message);
    throw err;
  }
}

/** GrantsService.RetireSigningKey: a rotated key stops being published. */
export async function retireSigningKey(deps: KeyAdminDeps, req: RetireSigningKeyRequest, ctx: HandlerContext) {
  try {
    const retired = await deps.keyring.retire(req.kid, auditKeyChange(deps, ctx, "keys.retire"));
    return { kid: retired.kid, publishedKids: retired.publishedKids };
  } catch (err) {
    if (err instanceof KeyringError) fail(err.code === "not_found" ? Reason.NOT_FOUND : Reason.INVALID_REQUEST, err.message);
    throw err;
  }
}
