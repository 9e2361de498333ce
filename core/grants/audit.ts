import type { HandlerContext } from "@connectrpc/connect";
import type { Knex } from "knex";
import type { AuditStore } from "../audit/store.js";
import { callFacts } from "../context.js";

export interface AuditEvent {
  actor: string;
  action: string;
  subject?: string;
  outcome?: "success" | "failure";
  reason?: string;
}

export interface AuditDeps {
  audit: AuditStore;
  clock: () => Date;
}

/** Appends an audit row for this call (its request id and the client address a gateway vouched for). */
export function appendAudit(deps: AuditDeps, conn: Knex | Knex.Transaction, ctx: HandlerContext, e: AuditEvent) {
  return deps.audit.append(conn, { ...callFacts(ctx), outcome: "success", ...e, at: deps.clock() });
}
