import type { ServiceImpl } from "@connectrpc/connect";
import { type Health, HealthCheckResponse_ServingStatus as Status } from "../gen/grpc/health/v1/health_pb.js";
import { Reason } from "../gen/vaultgate/common/v1/errors_pb.js";
import type { Db } from "./db/knex.js";
import { fail } from "./errors.js";
import { migrationsCurrent } from "./db/migrate.js";
import type { Knex } from "knex";

/** Only what the probes use, so this platform file depends on no domain room. */
export interface HealthDeps {
  db: Db;
  keyring: { current(): unknown };
  audit: {
    append(trx: Knex.Transaction, entry: { requestId: string; actor: string; action: string; outcome: "success"; at: Date }): Promise<unknown>;
  };
  /** Every chain on the evm rail has a node answering with its chain id (core/settlement). */
  settlementReady?: () => Promise<boolean>;
}

/** The readiness checks, each also served as its own health service `vaultgate.<check>`. */
export const READINESS_CHECKS = ["database", "migrations", "signing_key", "audit", "settlement"] as const;
export type ReadinessCheck = (typeof READINESS_CHECKS)[number];

/** Rolls the audit probe's transaction back: the probe leaves no record. */
class ProbeRollback extends Error {}

/**
 * gRPC health: "" is overall readiness, each check is its own service so a caller can name the
 * failing one. Without audit nothing may answer or commit; docs/reference/core-grpc.md lists the checks.
 */
export function createHealthService(deps: HealthDeps): ServiceImpl<typeof Health> {
  let migrated = false;

  async function database(): Promise<boolean> {
    try {
      await deps.db.raw("SELECT 1");
      return true;
    } catch {
      return false;
    }
  }

  async function migrations(): Promise<boolean> {
    try {
      // Once current, migrations stay current for this process's code.
      migrated ||= await migrationsCurrent(deps.db);
    } catch {
      return false;
    }
    return migrated;
  }

  async function audit(): Promise<boolean> {
    try {
      await deps.db.transaction(async (trx) => {
        await deps.audit.append(trx, { requestId: "readiness-probe", actor: "health", action: "health.audit_probe", outcome: "success", at: new Date() });
        throw new ProbeRollback();
      });
      return false;
    } catch (err) {
      return err instanceof ProbeRollback;
    }
  }

  const checks: Record<ReadinessCheck, () => Promise<boolean>> = {
    database,
    migrations,
    signing_key: async () => deps.keyring.current() !== undefined,
    audit,
    settlement: async () => (deps.settlementReady ? deps.settlementReady().catch(() => false) : true),
  };

  return {
    async check(req) {
      if (req.service === "" || req.service === "vaultgate") {
        // The database first: without it nothing else can be checked.
        if (!(await database())) return { status: Status.NOT_SERVING };
        const results = await Promise.all([checks.migrations(), checks.signing_key(), checks.audit(), checks.settlement()]);
        return { status: results.every(Boolean) ? Status.SERVING : Status.NOT_SERVING };
      }
      const name = req.service.startsWith("vaultgate.") ? req.service.slice("vaultgate.".length) : "";
      const run = (checks as Record<string, (() => Promise<boolean>) | undefined>)[name];
      // The health protocol: Check of a service the server does not know fails with NOT_FOUND.
      if (!Object.hasOwn(checks, name) || !run) fail(Reason.NOT_FOUND, "unknown service");
      return { status: (await run()) ? Status.SERVING : Status.NOT_SERVING };
    },
  };
}
