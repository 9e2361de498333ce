import { defineTool, iso, object, UTC_DATE_TIME, withoutDialect, type Tool } from "./kit.js";

/** The audit records of the grant's agent. */
export const auditTools: readonly Tool[] = [
  defineTool({
    name: "audit.list",
    category: "read",
    scope: "audit:stream",
    auth: "bearer",
    title: "List Audit Records",
    description:
      "Pages through the audit records of the grant's agent, oldest transaction first; save `watermark` and resume with `since` to get each record exactly once.",
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object(
      { cursor: { type: "string", maxLength: 1024 }, since: { type: "string", maxLength: 40 }, limit: { type: "integer", minimum: 1, maximum: 500 } },
      [],
    ),
    outputSchema: object(
      {
        records: {
          type: "array",
          // "$schema" belongs at the root only (JSON Schema 2020-12 core 8.1.1): a record is not a resource of its own.
          items: withoutDialect(
            object(
              {
                record_id: { type: "string" },
                action: { type: "string" },
                outcome: { type: "string", enum: ["success", "failure"] },
                reason: { type: "string" },
                subject: { type: "string" },
                created_at: UTC_DATE_TIME,
              },
              ["record_id", "action", "outcome", "reason", "subject", "created_at"],
            ),
          ),
        },
        next_cursor: { type: ["string", "null"] },
        watermark: { type: "string" },
      },
      ["records", "next_cursor", "watermark"],
    ),
    async call(args, ctx) {
      const res = await ctx.clients.budgets.listGrantAudit(
        { accessToken: ctx.accessToken, cursor: args.cursor ?? "", since: args.since ?? "", limit: args.limit ?? 0 },
        ctx.call,
      );
      return {
        records: res.records.map((r) => ({
          record_id: r.recordId,
          action: r.action,
          outcome: r.outcome,
          reason: r.reason,
          subject: r.subject,
          created_at: iso(r.createdAt),
        })),
        next_cursor: res.nextCursor || null,
        watermark: res.watermark,
      };
    },
  }),
];
