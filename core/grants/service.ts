import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { GrantsService } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { KeyringError, type Keyring } from "../keys/keyring.js";
import type { AuditStore } from "../audit/store.js";
import type { Db } from "../db/knex.js";
import { kRequestId } from "../context.js";

export interface GrantsServiceDeps {
  db: Db;
  keyring: Keyring;
  audit: AuditStore;
  clock: () => Date;
}

export function createGrantsService(deps: GrantsServiceDeps): ServiceImpl<typeof GrantsService> {
  return {
    async getJwks() {
      return { jwksJson: JSON.stringify(await deps.keyring.jwks()) };
    },

    async rotateSigningKey(_req, ctx) {
      try {
        const rotated = await deps.keyring.rotate();
        await deps.audit.append(deps.db, {
          requestId: ctx.values.get(kRequestId),
          actor: "admin",
          action: "keys.rotate",
          outcome: "success",
          subject: rotated.kid,
          at: deps.clock(),
        });
        return { kid: rotated.kid, publishedKids: rotated.publishedKids };
      } catch (err) {
        if (err instanceof KeyringError) fail(Reason.INVALID_REQUEST, err.message);
        throw err;
      }
    },

    // TODO(issue 5): agent grants arrive with the authorization server.
    verifyAgentToken: notYet,
    supersedeGrant: notYet,
    revokeAllGrants: notYet,
    refreshGrant: notYet,
    issueGrant: notYet,
  };
}

function notYet(): never {
  throw new ConnectError("agent grants are not implemented yet", Code.Unimplemented);
}
