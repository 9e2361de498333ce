import type { Knex } from "knex";
import type { Logger } from "pino";
import { PRUNE_AUTHORIZATION_CODES } from "../grants/stores/codes.js";
import { PRUNE_SIGNIN_FLOWS } from "../identity/flows-store.js";
import { PRUNE_DEV_OUTBOX, PRUNE_MAIL_OUTBOX } from "../identity/mail/outbox.js";
import { PRUNE_SIGNIN_CHALLENGES, PRUNE_WEB_SESSIONS } from "../identity/signin-store.js";
import { PRUNE_PARTNER_EVENTS, PRUNE_WEBHOOK_PREVIOUS_SECRETS } from "../partners/webhooks/outbox-store.js";
import { PRUNE_RATE_LIMIT_LOGS, PRUNE_RATE_LIMIT_WINDOWS } from "../rate-limits/store.js";
import type { Db } from "../db/knex.js";
import { RATE_WINDOW_MS } from "../partners/access.js";

/**
 * How long rows stay after they stop mattering (docs/architecture.md, "Costs that stay flat").
 * Every age is measured on core's clock.
 */
export interface Retention {
  /** Authorization codes are kept this long after they expire, so a replay still revokes what the code issued (default 1 day). */
  authorizationCodesMs: number;
  /** Partner events older than this leave the outbox and the `GET /events` feed, delivered or not (default 30 days). */
  partnerEventsMs: number;
  /** Messages in the development outbox older than this are dropped (default 1 day). */
  devOutboxMs: number;
  /** Sent and given-up messages leave the mail outbox this long after they ended (default 1 day). */
  mailOutboxMs: number;
}

export const DEFAULT_RETENTION: Retention = {
  authorizationCodesMs: 24 * 3600_000,
  partnerEventsMs: 30 * 24 * 3600_000,
  devOutboxMs: 24 * 3600_000,
  mailOutboxMs: 24 * 3600_000,
};

export interface PrunerOptions {
  db: Db;
  clock: () => Date;
  logger: Logger;
  retention?: Partial<Retention>;
  /** Rows deleted per statement (default 1000). */
  batchSize?: number;
  /** Statements per table per pass (default 10): a pass never runs unbounded. */
  maxBatchesPerTable?: number;
}

/** Rows deleted per table by one pass. */
export type PruneReport = Record<PrunedTable, number>;

export type PrunedTable =
  | "rate_limit_logs"
  | "rate_limit_windows"
  | "authorization_codes"
  | "signin_challenges"
  | "web_sessions"
  | "partner_events"
  | "partners"
  | "dev_outbox"
  | "signin_flows"
  | "mail_outbox";

/** A table's prune statement, from the room that owns the table, and when its rows stop mattering. */
interface Target {
  table: PrunedTable;
  /** DELETE of at most a batch of rows, bound to (cutoff, batch size) unless `bindings` says otherwise. */
  sql: string;
  bindings?: (cutoff: Date, batch: number) => unknown[];
  cutoff: (now: Date, r: Retention) => Date;
}

/** Each statement deletes one bounded batch (pruneBatchSql in core/db/sql.ts) and commits on its own. */
const TARGETS: readonly Target[] = [
  {
    // A window that ended holds no attempt that could still count: deleting the row
    // changes no decision (the next attempt starts a fresh row, as it would count afresh).
    ...PRUNE_RATE_LIMIT_LOGS,
    cutoff: (now) => now,
  },
  {
    // Partner resource limits count in fixed one-minute windows, each check only in the
    // window it falls in: a window that ended more than a minute ago counts nothing.
    ...PRUNE_RATE_LIMIT_WINDOWS,
    cutoff: (now) => new Date(now.getTime() - 2 * RATE_WINDOW_MS),
  },
  {
    // Consumed or not, an expired code can never be exchanged again.
    ...PRUNE_AUTHORIZATION_CODES,
    cutoff: (now, r) => new Date(now.getTime() - r.authorizationCodesMs),
  },
  {
    // Expired one-time codes (consumed ones included: they expire within minutes).
    ...PRUNE_SIGNIN_CHALLENGES,
    cutoff: (now) => now,
  },
  {
    // An expired browser flow (a provider's callback or a passkey challenge) is refused anyway.
    ...PRUNE_SIGNIN_FLOWS,
    cutoff: (now) => now,
  },
  {
    // Expired or signed-out sessions; one still named by a live step-up challenge waits
    // until that challenge has expired and gone (its foreign key).
    ...PRUNE_WEB_SESSIONS,
    cutoff: (now) => now,
  },
  {
    // Any event older than the feed's retention: one still pending that long belongs to a
    // partner without a webhook URL or not active, and would otherwise stay for good.
    ...PRUNE_PARTNER_EVENTS,
    cutoff: (now, r) => new Date(now.getTime() - r.partnerEventsMs),
  },
  {
    // Not rows but the sealed secret a webhook rotation kept for its overlap, which has ended.
    ...PRUNE_WEBHOOK_PREVIOUS_SECRETS,
    cutoff: (now) => now,
  },
  {
    ...PRUNE_DEV_OUTBOX,
    cutoff: (now, r) => new Date(now.getTime() - r.devOutboxMs),
  },
  {
    // Mail a server accepted or that was given up; a message still waiting stays whatever its age.
    ...PRUNE_MAIL_OUTBOX,
    cutoff: (now, r) => new Date(now.getTime() - r.mailOutboxMs),
  },
];

/**
 * Deletes rows of the tables that grow with traffic rather than with business data, once
 * they can no longer matter. Never touches audit_records (append-only) or anything a
 * decision still reads.
 */
export function createPruner(options: PrunerOptions) {
  const retention: Retention = { ...DEFAULT_RETENTION, ...options.retention };
  const batchSize = options.batchSize ?? 1000;
  const maxBatches = options.maxBatchesPerTable ?? 10;
  let running: Promise<PruneReport> | undefined;

  async function pass(): Promise<PruneReport> {
    const now = options.clock();
    const report = {} as PruneReport;
    for (const t of TARGETS) {
      const cutoff = t.cutoff(now, retention);
      const bindings = (t.bindings?.(cutoff, batchSize) ?? [cutoff, batchSize]) as Knex.RawBinding[];
      let deleted = 0;
      try {
        for (let i = 0; i < maxBatches; i++) {
          const { rows } = (await options.db.raw(t.sql, bindings)) as { rows: unknown[] };
          deleted += rows.length;
          if (rows.length < batchSize) break;
        }
      } catch (err) {
        // One table's failure (a lost connection, a row that gained a reference meanwhile)
        // leaves the others to be pruned; the next pass tries again.
        options.logger.warn({ err, table: t.table }, "prune batch failed");
      }
      report[t.table] = deleted;
    }
    const total = Object.values(report).reduce((a, b) => a + b, 0);
    if (total > 0) options.logger.info({ pruned: report }, "pruned expired rows");
    return report;
  }

  return {
    /** One pass over every table; a call while a pass runs shares that pass. */
    runOnce(): Promise<PruneReport> {
      running ??= pass().finally(() => {
        running = undefined;
      });
      return running;
    },
    /** The pass under way, if any (awaited on shutdown). */
    idle(): Promise<void> {
      return running
        ? running.then(
            () => undefined,
            () => undefined,
          )
        : Promise.resolve();
    },
  };
}

export type Pruner = ReturnType<typeof createPruner>;
