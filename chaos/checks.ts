import type pg from "pg";
import { rpcError, rpcResult, unconfirmed, type Attempt } from "./history.js";
import { withDb, type World } from "./world.js";
import { chainChecks } from "./chain-checks.js";
import { createDb } from "../core/db/knex.js";
import { createLedgerStore } from "../core/ledger/store.js";

export interface Violation {
  check: string;
  message: string;
  evidence?: unknown;
}

export interface CheckReport {
  name: string;
  checked: number;
  violations: Violation[];
}

const day = (d: Date) => d.toISOString().slice(0, 10);

/** Runs every checker over the history and the final database; never throws for a violation. */
export async function runChecks(w: World, unsettled: string[]): Promise<CheckReport[]> {
  return withDb(w.db.url, async (c) => [
    await capsAndBalances(w, c),
    await paymentIdempotency(w, c, unsettled),
    await batchIdempotency(w, c, unsettled),
    revocation(w, await paymentCreation(c)),
    await auditFollowers(w, c),
    await auditedRefusals(w, c),
    await webhooks(w, c),
    await ledgerBalances(w),
    ...(await chainChecks(w, c)),
  ]);
}

class Report implements CheckReport {
  checked = 0;
  violations: Violation[] = [];
  constructor(readonly name: string) {}
  fail(message: string, evidence?: unknown): void {
    this.violations.push({ check: this.name, message, evidence });
  }
}

const report = (name: string) => new Report(name);

/** The whole database's books, as `vaultgate ledger verify` proves them, after every crash and restart. */
async function ledgerBalances(w: World): Promise<CheckReport> {
  const r = report("ledger balances");
  const db = createDb({ url: w.db.url, poolMax: 1 });
  try {
    const v = await createLedgerStore(db).verify();
    r.checked = v.postings;
    for (const d of v.discrepancies) r.fail(`${d.check}: ${d.message}`);
  } finally {
    await db.destroy();
  }
  return r;
}

async function capsAndBalances(w: World, c: pg.Client): Promise<CheckReport> {
  const r = report("caps and balances");
  for (const o of w.owners) {
    // An accepted payment counts from its acceptance; one that failed to settle stops
    // counting at its refund. Reserved plus completed spend is replayed in ledger order
    // (posting seq: each is written holding the vault's lock, clocks are read before it).
    const { rows: accepted } = await c.query(
      `SELECT a.id, a.amount_cents::bigint AS amount, a.completed_at,
              min(p.seq) FILTER (WHERE t.kind = 'payment')::bigint AS accepted_seq, min(p.seq) FILTER (WHERE t.kind = 'payment.refund')::bigint AS refund_seq
         FROM agent_payments a JOIN ledger_transactions t ON t.reference = 'payment:' || a.id JOIN ledger_postings p ON p.transaction_id = t.id
        WHERE a.vault_id = $1 AND a.status = 'completed' GROUP BY a.id`,
      [o.childVaultId],
    );
    const events = accepted.flatMap((p) => [
      { p, seq: Number(p.accepted_seq), sign: 1 },
      ...(p.refund_seq !== null ? [{ p, seq: Number(p.refund_seq), sign: -1 }] : []),
    ]);
    events.sort((a, b) => a.seq - b.seq);
    let total = 0;
    const perDay = new Map<string, number>();
    for (const { p, sign } of events) {
      const amount = Number(p.amount);
      const d = day(p.completed_at);
      if (sign < 0) {
        total -= amount;
        perDay.set(d, perDay.get(d)! - amount);
        continue;
      }
      r.checked++;
      if (amount > o.caps.perTx) r.fail(`owner ${o.index}: payment ${p.id} of ${amount} is above the per-tx cap ${o.caps.perTx}`);
      total += amount;
      perDay.set(d, (perDay.get(d) ?? 0) + amount);
      if (perDay.get(d)! > o.caps.perDay)
        r.fail(`owner ${o.index}: completed payments of ${d} reach ${perDay.get(d)} at ${p.id}, above the per-day cap ${o.caps.perDay}`);
      if (total > o.caps.lifetime) r.fail(`owner ${o.index}: completed payments reach ${total} at ${p.id}, above the lifetime cap ${o.caps.lifetime}`);
      if (total > o.funded) r.fail(`owner ${o.index}: completed payments reach ${total} at ${p.id}, above the funding ${o.funded} (balance would be negative)`);
    }
    const v = await c.query(`SELECT balance_cents::bigint AS b FROM vaults WHERE id = $1`, [o.childVaultId]);
    const balance = Number(v.rows[0].b);
    if (balance !== o.funded - total) r.fail(`owner ${o.index}: vault balance ${balance} != funding ${o.funded} - completed debits ${total}`);
  }
  for (const p of w.partners) {
    const { rows: t } = await c.query(
      `SELECT t.balance_cents::bigint AS b, t.spent_lifetime_cents::bigint AS s FROM treasuries t JOIN partners p ON p.id = t.partner_id WHERE p.client_id = $1`,
      [p.clientId],
    );
    const { rows } = await c.query(
      `SELECT e.execution_id, e.amount_cents::bigint AS amount, e.executed_at FROM treasury_executions e JOIN partners p ON p.id = e.partner_id WHERE p.client_id = $1 ORDER BY e.executed_at, e.execution_id`,
      [p.clientId],
    );
    let total = 0;
    const perDay = new Map<string, number>();
    for (const e of rows) {
      const amount = Number(e.amount);
      r.checked++;
      if (amount > p.caps.perItem) r.fail(`partner ${p.index}: execution ${e.execution_id} of ${amount} is above the per-item cap ${p.caps.perItem}`);
      total += amount;
      const d = day(e.executed_at);
      perDay.set(d, (perDay.get(d) ?? 0) + amount);
      if (perDay.get(d)! > p.caps.perDay)
        r.fail(`partner ${p.index}: executions of ${d} reach ${perDay.get(d)} at ${e.execution_id}, above the per-day cap ${p.caps.perDay}`);
      if (total > p.caps.lifetime) r.fail(`partner ${p.index}: executions reach ${total} at ${e.execution_id}, above the lifetime cap ${p.caps.lifetime}`);
      if (total > p.funded) r.fail(`partner ${p.index}: executions reach ${total}, above the funding ${p.funded}`);
    }
    const balance = Number(t[0].b);
    if (balance !== p.funded - total) r.fail(`partner ${p.index}: treasury balance ${balance} != funding ${p.funded} - executions ${total}`);
    if (Number(t[0].s) !== total) r.fail(`partner ${p.index}: spent_lifetime_cents ${t[0].s} != executions ${total}`);
  }
  return r;
}

function groupByOp(attempts: Attempt[]): Map<string, Attempt[]> {
  const m = new Map<string, Attempt[]>();
  for (const a of attempts) m.set(a.op, [...(m.get(a.op) ?? []), a]);
  return m;
}

const DEFINITIVE_REFUSALS = new Set(["policy_denied", "insufficient_funds", "idempotency_conflict", "invalid_params"]);

async function paymentIdempotency(w: World, c: pg.Client, unsettled: string[]): Promise<CheckReport> {
  const r = report("payment idempotency and convergence");
  const { rows } = await c.query(`SELECT id, vault_id, idempotency_key, status FROM agent_payments`);
  const byId = new Map(rows.map((p) => [p.id as string, p]));
  for (const [op, attempts] of groupByOp(w.history.byKind("payment"))) {
    r.checked++;
    if (unsettled.includes(op)) r.fail(`${op}: no definitive answer after retries on a healthy cluster`, attempts.map(brief));
    const ids = new Set<string>();
    let succeededAt: Attempt | undefined;
    for (const a of attempts) {
      const res = rpcResult<{ payment_id: string; kind: string }>(a);
      if (res) {
        ids.add(res.payment_id);
        succeededAt ??= a;
        const row = byId.get(res.payment_id);
        if (!row) r.fail(`${op}: answered payment ${res.payment_id} (attempt ${a.n}) that is not in agent_payments`, brief(a));
        else if (row.idempotency_key !== a.meta?.key) r.fail(`${op}: payment ${res.payment_id} carries key ${row.idempotency_key}, asked ${a.meta?.key}`);
        continue;
      }
      const e = rpcError(a);
      const reason = e?.data?.reason_id as string | undefined;
      if (succeededAt && reason && DEFINITIVE_REFUSALS.has(reason) && a.start > succeededAt.end) {
        r.fail(`${op}: succeeded (attempt ${succeededAt.n}) then the identical retry was refused ${reason} (attempt ${a.n})`, [brief(succeededAt), brief(a)]);
      }
    }
    if (ids.size > 1) r.fail(`${op}: one idempotency key answered ${ids.size} different payments`, [...ids]);
  }
  return r;
}

async function batchIdempotency(w: World, c: pg.Client, unsettled: string[]): Promise<CheckReport> {
  const r = report("batch idempotency and execution ids");
  const { rows: execs } = await c.query(
    `SELECT p.client_id, e.execution_id, e.payout_id, e.batch_id, e.amount_cents::bigint AS amount FROM treasury_executions e JOIN partners p ON p.id = e.partner_id`,
  );
  const execKey = (clientId: string, id: string) => `${clientId}/${id}`;
  const execById = new Map(execs.map((e) => [execKey(e.client_id, e.execution_id), e]));
  const { rows: batches } = await c.query(`SELECT b.id, p.client_id, b.idempotency_key FROM treasury_batches b JOIN partners p ON p.id = b.partner_id`);
  const batchById = new Map(batches.map((b) => [b.id as string, b]));
  const byKey = new Map<string, Set<string>>();
  const newlyExecuted = new Map<string, Set<string>>();
  for (const [op, attempts] of groupByOp(w.history.byKind("batch"))) {
    r.checked++;
    if (unsettled.includes(op)) r.fail(`${op}: no definitive answer after retries on a healthy cluster`, attempts.map(brief));
    for (const a of attempts) {
      if (a.status !== 200 && a.status !== 201) continue;
      const p = w.partners[a.meta!.partner as number]!;
      const body = a.response as { batch_id: string; items: { execution_id: string; payout_id: string; status: string }[] };
      const k = `${p.clientId}/${a.meta!.key}`;
      byKey.set(k, (byKey.get(k) ?? new Set()).add(body.batch_id));
      const stored = batchById.get(body.batch_id);
      if (!stored) r.fail(`${op}: answered batch ${body.batch_id} (attempt ${a.n}) that is not in treasury_batches`, brief(a));
      else if (stored.idempotency_key !== a.meta!.key)
        r.fail(`${op}: batch ${body.batch_id} is stored under key ${stored.idempotency_key}, asked ${a.meta!.key}`);
      for (const it of body.items) {
        const e = execById.get(execKey(p.clientId, it.execution_id));
        if (!e) {
          r.fail(`${op}: execution ${it.execution_id} answered ${it.status} but is not in treasury_executions`, brief(a));
          continue;
        }
        if (e.payout_id !== it.payout_id) r.fail(`${op}: execution ${it.execution_id} answered payout ${it.payout_id}, stored ${e.payout_id}`);
        if (it.status === "executed") {
          const ek = execKey(p.clientId, it.execution_id);
          newlyExecuted.set(ek, (newlyExecuted.get(ek) ?? new Set()).add(body.batch_id));
          if (e.batch_id !== body.batch_id)
            r.fail(`${op}: execution ${it.execution_id} answered executed by batch ${body.batch_id}, stored under batch ${e.batch_id}`);
        }
      }
    }
  }
  for (const [k, ids] of byKey) if (ids.size > 1) r.fail(`idempotency key ${k} answered ${ids.size} different batches`, [...ids]);
  for (const [k, ids] of newlyExecuted) if (ids.size > 1) r.fail(`execution ${k} was newly executed by ${ids.size} batches`, [...ids]);
  return r;
}

async function paymentCreation(c: pg.Client): Promise<Map<string, Date>> {
  const { rows } = await c.query(`SELECT id, created_at FROM agent_payments`);
  return new Map(rows.map((p) => [p.id as string, p.created_at as Date]));
}

/**
 * A grant is dead once its revocation's answer reached the client (the revoke had committed);
 * no call sent after that may succeed, except replaying a payment created before the revoke was asked.
 */
function revocation(w: World, created: Map<string, Date>): CheckReport {
  const r = report("no success after revocation");
  const deaths = new Map<string, (typeof w.deaths)[number]>();
  for (const d of w.deaths) {
    const prev = deaths.get(d.grantId);
    if (!prev || d.deadAt < prev.deadAt) deaths.set(d.grantId, d);
  }
  for (const a of w.history.attempts) {
    if (!["payment", "simulate", "budget", "audit", "killswitch"].includes(a.kind)) continue;
    const death = deaths.get(a.meta?.grantId as string);
    if (!death || a.start <= death.deadAt) continue;
    r.checked++;
    const res = rpcResult<{ payment_id?: string }>(a);
    if (!res) continue;
    if (a.kind === "payment" && res.payment_id) {
      const at = created.get(res.payment_id);
      if (at && at.getTime() < death.revokeStart) continue;
    }
    r.fail(
      `${a.kind} ${a.op} (attempt ${a.n}, ${a.replica}) succeeded with grant ${death.grantId} sent ${a.start - death.deadAt} ms after its ${death.cause} was answered`,
      brief(a),
    );
  }
  return r;
}

async function auditFollowers(w: World, c: pg.Client): Promise<CheckReport> {
  const r = report("audit followers see every record once");
  for (const [principal, f] of w.followers) {
    const counts = new Map<string, number>();
    for (const id of f.seen) counts.set(id, (counts.get(id) ?? 0) + 1);
    for (const [id, n] of counts) if (n > 1) r.fail(`follower of agent:${principal} was handed record ${id} ${n} times`);
    // The feed is ordered by (writing transaction id, seq); its watermark is "<xid>.<seq>".
    const [wxid, wseq] = f.watermark.includes(".") ? f.watermark.split(".") : ["0", f.watermark];
    const below = `(xid < $2::text::xid8 OR (xid = $2::text::xid8 AND seq <= $3::int8))`;
    const { rows } = await c.query(`SELECT seq::text AS seq, action, created_at FROM audit_records WHERE actor = $1 AND ${below} ORDER BY xid, seq`, [
      `agent:${principal}`,
      wxid,
      wseq,
    ]);
    r.checked += rows.length;
    const missed = rows.filter((row) => !counts.has(row.seq));
    if (missed.length)
      r.fail(
        `follower of agent:${principal} never saw ${missed.length} of ${rows.length} records below its watermark ${f.watermark} (first: seq ${missed[0].seq} ${missed[0].action})`,
        missed.slice(0, 10),
      );
    const after = await c.query(`SELECT count(*)::int AS n FROM audit_records WHERE actor = $1 AND NOT ${below}`, [`agent:${principal}`, wxid, wseq]);
    if (after.rows[0].n > 0)
      r.fail(`follower of agent:${principal} ended at watermark ${f.watermark} with ${after.rows[0].n} records after it never handed out`);
  }
  return r;
}

async function auditedRefusals(w: World, c: pg.Client): Promise<CheckReport> {
  const r = report("every outcome that reached core is audited");
  const { rows } = await c.query(`SELECT request_id, action, outcome, subject FROM audit_records`);
  const byRequest = new Set(rows.map((a) => a.request_id as string));
  const successSubjects = new Set(rows.filter((a) => a.outcome === "success").map((a) => `${a.action}/${a.subject}`));
  // Refusals decided by core's rules carry a request id that must have its audit row.
  for (const a of w.history.attempts) {
    if (a.kind === "payment") {
      const e = rpcError(a);
      const reason = e?.data?.reason_id as string | undefined;
      if (reason === "policy_denied" || reason === "insufficient_funds") {
        r.checked++;
        if (!byRequest.has(String(e!.data!.request_id)))
          r.fail(`payment ${a.op} attempt ${a.n} refused ${reason} without an audit row for request ${e!.data!.request_id}`, brief(a));
      }
    } else if (a.kind === "batch" && a.status >= 400 && a.status < 500 && a.status !== 401 && a.status !== 413) {
      const err = (a.response as { error?: { code: string; request_id: string } })?.error;
      if (!err || err.code === "rate_limited") continue;
      r.checked++;
      if (!byRequest.has(err.request_id))
        r.fail(`batch ${a.op} attempt ${a.n} refused ${a.status} ${err.code} without an audit row for request ${err.request_id}`, brief(a));
    }
  }
  // Money never moves unaudited: every completed payment and every stored batch has its success row.
  const { rows: payments } = await c.query(`SELECT id FROM agent_payments WHERE status = 'completed'`);
  for (const p of payments) {
    r.checked++;
    if (!successSubjects.has(`payments.initiate/${p.id}`)) r.fail(`completed payment ${p.id} has no payments.initiate success audit row`);
  }
  const { rows: batches } = await c.query(`SELECT id FROM treasury_batches`);
  for (const b of batches) {
    r.checked++;
    if (!successSubjects.has(`treasury.batch.execute/${b.id}`)) r.fail(`stored batch ${b.id} has no treasury.batch.execute success audit row`);
  }
  return r;
}

async function webhooks(w: World, c: pg.Client): Promise<CheckReport> {
  const r = report("webhooks respect suspension and are not lost");
  // At most one delivery per replica's worker may already be on the wire when a suspension commits.
  const allowance = w.replicas.length;
  for (const s of w.suspensions) {
    const during = w.deliveries.filter((d) => d.partner === s.partner && d.at > s.suspendedAt && d.at < s.resumeStart);
    r.checked++;
    if (during.length > allowance) {
      r.fail(
        `partner ${s.partner}: ${during.length} webhooks arrived while suspended (${during[0]!.at - s.suspendedAt} ms after the suspension was answered; ${allowance} allowed on the wire)`,
        during.slice(0, 5),
      );
    }
  }
  const received = new Set(w.deliveries.map((d) => d.webhookId));
  for (const p of w.partners) {
    const { rows } = await c.query(
      `SELECT e.id, e.type, e.delivery_state, e.data->>'batch_id' AS batch_id FROM partner_events e JOIN partners p ON p.id = e.partner_id WHERE p.client_id = $1`,
      [p.clientId],
    );
    const perBatch = new Map<string, number>();
    for (const e of rows) {
      r.checked++;
      if (!received.has(e.id))
        r.fail(`partner ${p.index}: event ${e.id} (${e.type}, ${e.delivery_state}) was never delivered after the partner was active again`);
      if (e.batch_id) perBatch.set(e.batch_id, (perBatch.get(e.batch_id) ?? 0) + 1);
    }
    const { rows: batches } = await c.query(
      `SELECT b.id FROM treasury_batches b JOIN partners p ON p.id = b.partner_id WHERE p.client_id = $1 AND EXISTS (SELECT 1 FROM treasury_executions e WHERE e.batch_id = b.id)`,
      [p.clientId],
    );
    for (const b of batches)
      if (perBatch.get(b.id) !== 1) r.fail(`partner ${p.index}: batch ${b.id} that paid has ${perBatch.get(b.id) ?? 0} payout.executed events`);
  }
  return r;
}

function brief(a: Attempt) {
  return { n: a.n, op: a.op, replica: a.replica, start: a.start, end: a.end, status: a.status, error: a.error, response: a.response, meta: a.meta };
}

export { unconfirmed };
