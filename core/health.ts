import { ConnectError, type ServiceImpl } from "@connectrpc/connect";
import { type Health, HealthCheckResponse_ServingStatus as Status } from "../gen/grpc/health/v1/health_pb.js";
import { Reason } from "../gen/vaultgate/common/v1/errors_pb.js";
import type { Db } from "./db/knex.js";
import { fail } from "./errors.js";
import { migrationsCurrent } from "./db/migrate.js";
import type { Knex } from "knex";

/** Only what the probes use, so this platform file depends on no domain room. */
export interface HealthDeps {
  db: Db;
  keyring: { readyToSign(): Promise<boolean> };
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
export function createHealthService(deps: HealthDeps, watchIntervalMs = 5_000): ServiceImpl<typeof Health> {
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
    signing_key: () => deps.keyring.readyToSign(),
    audit,
    settlement: async () => (deps.settlementReady ? deps.settlementReady().catch(() => false) : true),
  };

  /** The probe for a service name, or undefined for a service we do not know. */
  function probeOf(service: string): (() => Promise<boolean>) | undefined {
    if (service === "" || service === "vaultgate") {
      return async () => {
        // The database first: without it nothing else can be checked.
        if (!(await database())) return false;
        const results = await Promise.all([checks.migrations(), checks.signing_key(), checks.audit(), checks.settlement()]);
        return results.every(Boolean);
      };
    }
    const name = service.startsWith("vaultgate.") ? service.slice("vaultgate.".length) : "";
    return Object.hasOwn(checks, name) ? checks[name as ReadinessCheck] : undefined;
  }

  // Watchers of one service share one probe per interval, so many watchers cost one probe.
  const watched = new Map<string, { at: number; status: Promise<Status> }>();
  function watchedStatus(service: string, probe: () => Promise<boolean>): Promise<Status> {
    const hit = watched.get(service);
    if (hit && Date.now() - hit.at < watchIntervalMs) return hit.status;
    const status = probe().then((ok) => (ok ? Status.SERVING : Status.NOT_SERVING));
    watched.set(service, { at: Date.now(), status });
    return status;
  }

  return {
    async check(req) {
      const probe = probeOf(req.service);
      // The health protocol: Check of a service the server does not know fails with NOT_FOUND.
      if (!probe) fail(Reason.NOT_FOUND, "unknown service");
      return { status: (await probe()) ? Status.SERVING : Status.NOT_SERVING };
    },
    // Every check once, in parallel; overall readiness is all of them (as Check of "" answers).
    async list() {
      const names = READINESS_CHECKS.map((name) => `vaultgate.${name}`);
      const results = await Promise.all(READINESS_CHECKS.map((name) => checks[name]()));
      const status = (ok: boolean) => ({ status: ok ? Status.SERVING : Status.NOT_SERVING });
      const statuses = Object.fromEntries(names.map((name, i) => [name, status(results[i]!)]));
      const overall = status(results.every(Boolean));
      return { statuses: { ...statuses, "": overall, vaultgate: overall } };
    },
    // The health protocol: the current status at once, then each change; an unknown service is
    // SERVICE_UNKNOWN without ending the call. The call ends when the caller or core goes away.
    async *watch(req, ctx) {
      const probe = probeOf(req.service);
      let last: Status | undefined;
      while (!ctx.signal.aborted) {
        const status = probe ? await watchedStatus(req.service, probe) : Status.SERVICE_UNKNOWN;
        if (status !== last) yield { status };
        last = status;
        await pause(watchIntervalMs, ctx.signal);
      }
      // Core stopping ends the watch with its retryable UNAVAILABLE; a caller's cancel needs no answer.
      if (ctx.signal.reason instanceof ConnectError) throw ctx.signal.reason;
    },
  };
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}
