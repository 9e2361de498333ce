import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { Keyring } from "./keyring.js";

/**
 * Refuses with SIGNING_UNAVAILABLE (503) unless this process can sign now, its key not withdrawn by
 * another replica. Every token issuer awaits it, outside any transaction, before spending anything.
 */
export async function requireSigning(keyring: Pick<Keyring, "readyToSign" | "problem">): Promise<void> {
  if (!(await keyring.readyToSign())) fail(Reason.SIGNING_UNAVAILABLE, "signing is unavailable", {}, keyring.problem());
}
