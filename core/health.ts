import type { ServiceImpl } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus as Status } from "../gen/grpc/health/v1/health_pb.js";
import type { Db } from "./db/knex.js";
import { migrationsCurrent } from "./db/migrate.js";
import type { Keyring } from "./keys/keyring.js";

export interface HealthDeps {
  db: Db;
  keyring: Keyring;
}

/**
 * The standard gRPC health protocol; service "" is overall readiness: database
 * reachable, migrations current, signing key usable.
 */
export function createHealthService(deps: HealthDeps): ServiceImpl<typeof Health> {
  let migrated = false;
  return {
    async check(req) {
      if (req.service !== "" && req.service !== "vaultgate") return { status: Status.SERVICE_UNKNOWN };
      try {
        await deps.db.raw("SELECT 1");
        // Once current, migrations stay current for this process's code.
        migrated ||= await migrationsCurrent(deps.db);
      } catch {
        return { status: Status.NOT_SERVING };
      }
      const ok = migrated && deps.keyring.current() !== undefined;
      return { status: ok ? Status.SERVING : Status.NOT_SERVING };
    },
  };
}
