import { PartnerStatus } from "../gen/vaultgate/partners/v1/partners_pb.js";
import { AGENT_SCOPES } from "../lib/vocabulary.js";
import type { Replica } from "./cluster.js";
import { attempt, rpcError, rpcResult, unconfirmed, type Attempt, type HttpCall } from "./history.js";
import type { Rng } from "./rng.js";
import { CHAIN_FAULTS, chainFault, settleChain } from "./chain-faults.js";
import { admin, jwtPayload, sleep, withDb, type Owner, type Partner, type PoolItem, type Suspension, type World } from "./world.js";

function target(w: World, rng: Rng): Replica {
  // Prefer replicas that are up, but sometimes hit a dead one: clients do not know.
  const up = w.replicas.filter((r) => r.up);
  return up.length && rng.chance(0.9) ? rng.pick(up) : rng.pick(w.replicas);
}

/**
 * Sends a logical operation and retries the identical request (to any replica) while the
 * answer is unconfirmed. `refresh` may rebuild the call (a fresh bearer) between retries.
 */
async function send(w: World, rng: Rng, op: string, kind: string, call: () => HttpCall, meta: () => Record<string, unknown>, maxTries = 8): Promise<Attempt> {
  let last!: Attempt;
  for (let i = 0; i < maxTries; i++) {
    last = await attempt(w.history, op, kind, target(w, rng), call(), meta());
    if (!unconfirmed(last)) return last;
    await sleep(rng.int(100, 400) * (i + 1));
  }
  return last;
}

function rpcCall(path: string, token: string, id: number, method: string, params: unknown): HttpCall {
  return { method: "POST", path, headers: { authorization: `Bearer ${token}` }, body: { jsonrpc: "2.0", id, method, params } };
}

// ---------------------------------------------------------------- clients

let opCounter = 0;
const nextOp = (prefix: string) => `${prefix}-${++opCounter}`;
const live = (w: World) => Date.now() < w.deadline;

async function payer(w: World, rng: Rng, o: Owner): Promise<void> {
  while (live(w)) {
    const amount = rng.pick([o.caps.perTx, o.caps.perTx + 1, rng.int(1, o.caps.perTx), rng.int(Math.floor(o.caps.perTx / 2), o.caps.perTx)]);
    const key = `pay-${o.index}-${rng.hex(12)}`;
    // Half the payments settle on the evm chain (to a few counterparties), half on the sandbox rail.
    const evm = w.chain && (o.evmOnly || rng.chance(0.5));
    const params = {
      counterparty: evm
        ? { address: rng.pick(w.chain!.counterparties), chain: "eth", token: "USDC" }
        : { address: `0x${rng.hex(40)}`, chain: "base", token: "USDC" },
      amount_cents: amount,
      currency: "USD",
      idempotency_key: key,
    };
    const op = nextOp(`pay${o.index}`);
    const id = rng.int(1, 1_000_000);
    // The bearer is read when each attempt is sent: a retry after a kill switch uses the reissued grant.
    const call = () => rpcCall("/mcp/write", o.agent.token, id, "payments.initiate", params);
    const meta = () => ({ owner: o.index, grantId: o.agent.grantId, key, amount });
    if (rng.chance(0.15)) {
      // The same request on both replicas at once: one payment at most.
      await Promise.all(w.replicas.map((r) => attempt(w.history, op, "payment", r, call(), meta())));
    }
    await send(w, rng, op, "payment", call, meta);
    await sleep(o.evmOnly ? rng.int(300, 900) : rng.int(20, 150));
  }
}

async function simulator(w: World, rng: Rng): Promise<void> {
  while (live(w)) {
    const o = rng.pick(w.owners);
    const params = {
      counterparty: { address: "0x00000000000000000000000000000000000c4a05", chain: "base", token: "USDC" },
      amount_cents: rng.int(1, o.caps.perTx + 10),
      currency: "USD",
      idempotency_key: `sim-${rng.hex(12)}`,
    };
    await attempt(w.history, nextOp("sim"), "simulate", target(w, rng), rpcCall("/mcp/write", o.agent.token, 1, "payments.simulate", params), {
      owner: o.index,
      grantId: o.agent.grantId,
    });
    await sleep(rng.int(100, 400));
  }
}

async function budgetCreator(w: World, rng: Rng): Promise<void> {
  while (live(w)) {
    const o = rng.pick(w.owners);
    const key = `budget-${o.index}-${rng.hex(12)}`;
    const params = { purpose: "trip", display_name: "Chaos child", amount_cap_cents_per_tx: 100, chain_allowlist: ["base"], idempotency_key: key };
    await send(
      w,
      rng,
      nextOp("budget"),
      "budget",
      () => rpcCall("/mcp/treasury", o.owner.token, 7, "agent.budget.create", params),
      () => ({ owner: o.index, grantId: o.owner.grantId, key }),
      5,
    );
    await sleep(rng.int(600, 1500));
  }
}

async function reissue(w: World, rng: Rng, o: Owner): Promise<void> {
  const ownerTok = (await admin(w, rng, (c) => c.grants.issueGrant({ userId: o.userId, vaultId: o.rootVaultId, scopes: [...AGENT_SCOPES], stepUp: true })))
    .token!;
  w.issues.push({ grantId: ownerTok.jti, userId: o.userId, issuedAt: Date.now() });
  o.owner = { token: ownerTok.accessToken, grantId: ownerTok.jti };
  const agentTok = (await admin(w, rng, (c) => c.grants.issueGrant({ userId: o.userId, vaultId: o.childVaultId, scopes: [...AGENT_SCOPES] }))).token!;
  w.issues.push({ grantId: agentTok.jti, userId: o.userId, issuedAt: Date.now() });
  o.agent = { token: agentTok.accessToken, refresh: agentTok.refreshToken, grantId: agentTok.jti };
  o.principal = jwtPayload(agentTok.accessToken).act!.sub;
}

/** Kill switches (the agent's own killSwitch.all) and refreshes (operator RefreshGrant). */
async function revoker(w: World, rng: Rng): Promise<void> {
  await sleep(rng.int(1000, 3000));
  while (live(w)) {
    const o = rng.pick(w.owners);
    if (rng.chance(0.5)) {
      const start = Date.now();
      const a = await send(
        w,
        rng,
        nextOp("kill"),
        "killswitch",
        () => rpcCall("/mcp/treasury", o.agent.token, 3, "killSwitch.all", { reason: "chaos" }),
        () => ({ owner: o.index, grantId: o.agent.grantId }),
        6,
      );
      if (rpcResult(a)) {
        // Every grant of the user answered before this kill switch started is dead from its answer on.
        for (const g of w.issues)
          if (g.userId === o.userId && g.issuedAt < start)
            w.deaths.push({ grantId: g.grantId, userId: o.userId, cause: "kill_switch", revokeStart: a.start, deadAt: a.end });
      }
      await reissue(w, rng, o).catch((e) => w.log(`reissue failed: ${e}`));
    } else {
      const old = o.agent;
      const start = Date.now();
      let rec: Attempt | undefined;
      try {
        const res = await admin(w, rng, (c) => c.grants.refreshGrant({ refreshToken: old.refresh }), 6);
        const t = res.token!;
        rec = w.history.record({
          op: nextOp("refresh"),
          kind: "refresh",
          replica: "admin",
          method: "RPC",
          path: "GrantsService.RefreshGrant",
          start,
          end: Date.now(),
          status: 200,
          meta: { owner: o.index, grantId: old.grantId, newGrantId: t.jti },
        });
        w.issues.push({ grantId: t.jti, userId: o.userId, issuedAt: Date.now() });
        w.deaths.push({ grantId: old.grantId, userId: o.userId, cause: "refresh", revokeStart: start, deadAt: rec.end });
        if (o.agent.grantId === old.grantId) o.agent = { token: t.accessToken, refresh: t.refreshToken, grantId: t.jti };
      } catch (err) {
        w.history.record({
          op: nextOp("refresh"),
          kind: "refresh",
          replica: "admin",
          method: "RPC",
          path: "GrantsService.RefreshGrant",
          start,
          end: Date.now(),
          status: 0,
          error: String(err),
          meta: { owner: o.index, grantId: old.grantId },
        });
        // The refresh may or may not have happened: a fresh grant keeps the agent going.
        await reissue(w, rng, o).catch((e) => w.log(`reissue failed: ${e}`));
      }
    }
    await sleep(rng.int(2500, 6000));
  }
}

interface BatchSpec {
  key: string;
  body: { payer_entity_id: string; items: PoolItem[] };
}

async function treasurer(w: World, rng: Rng, p: Partner): Promise<void> {
  const sent: BatchSpec[] = [];
  while (live(w)) {
    let spec: BatchSpec;
    const roll = rng.float();
    if (sent.length && roll < 0.25) {
      spec = rng.pick(sent); // an identical replay, maybe on the other replica
    } else {
      const n = rng.int(1, 4);
      const items: PoolItem[] = [];
      while (items.length < n) {
        const it = rng.pick(p.pool);
        if (!items.includes(it)) items.push(it);
      }
      const body = { payer_entity_id: p.payerEntityId, items: items.map((it) => (rng.chance(0.05) ? { ...it, amount_cents: it.amount_cents + 1 } : it)) };
      // Sometimes a used key with another body: a conflict, or a success if the first never stored.
      const key = sent.length && roll < 0.3 ? rng.pick(sent).key : `batch-${p.index}-${rng.hex(12)}`;
      spec = { key, body };
      sent.push(spec);
    }
    const op = nextOp(`batch${p.index}`);
    const call = (): HttpCall => ({
      method: "POST",
      path: "/api/partner/treasury/payouts",
      headers: { authorization: `Bearer ${p.token}`, "idempotency-key": spec.key },
      body: spec.body,
    });
    const meta = () => ({ partner: p.index, key: spec.key });
    if (rng.chance(0.15)) await Promise.all(w.replicas.map((r) => attempt(w.history, op, "batch", r, call(), meta())));
    await send(w, rng, op, "batch", call, meta);
    await sleep(rng.int(50, 300));
  }
}

async function suspender(w: World, rng: Rng): Promise<void> {
  await sleep(rng.int(2000, 4000));
  while (live(w)) {
    const p = rng.pick(w.partners);
    const setStatus = async (status: PartnerStatus, label: string) => {
      const start = Date.now();
      await admin(w, rng, (c) => c.partners.setPartnerStatus({ clientId: p.clientId, status }));
      return w.history.record({
        op: nextOp(label),
        kind: label,
        replica: "admin",
        method: "RPC",
        path: "PartnersService.SetPartnerStatus",
        start,
        end: Date.now(),
        status: 200,
        meta: { partner: p.index },
      });
    };
    try {
      const s = await setStatus(PartnerStatus.SUSPENDED, "suspend");
      p.status = "suspended";
      const susp: Suspension = { partner: p.index, suspendedAt: s.end, resumeStart: Infinity };
      w.suspensions.push(susp);
      await sleep(rng.int(1000, 3500));
      susp.resumeStart = Date.now();
      await setStatus(PartnerStatus.ACTIVE, "resume");
      p.status = "active";
    } catch (err) {
      w.log(`suspension cycle failed: ${err}`);
    }
    await sleep(rng.int(2000, 5000));
  }
}

/** Follows one agent principal's audit feed by watermark, remembering every record id handed out. */
export async function followOnce(w: World, rng: Rng, o: Owner): Promise<void> {
  const f = w.followers.get(o.principal) ?? { watermark: "0", seen: [] };
  w.followers.set(o.principal, f);
  let cursor: string | undefined;
  for (let page = 0; page < 50; page++) {
    const params = cursor ? { cursor, limit: 50 } : { since: f.watermark, limit: 50 };
    const a = await attempt(w.history, nextOp("audit"), "audit", target(w, rng), rpcCall("/mcp/read", o.agent.token, 9, "audit.list", params), {
      owner: o.index,
      grantId: o.agent.grantId,
    });
    const res = rpcResult<{ records: { record_id: string }[]; next_cursor: string | null; watermark: string }>(a);
    if (!res) return;
    for (const r of res.records) f.seen.push(r.record_id);
    f.watermark = res.watermark;
    if (!res.next_cursor) return;
    cursor = res.next_cursor;
  }
}

async function follower(w: World, rng: Rng, o: Owner): Promise<void> {
  while (live(w)) {
    await followOnce(w, rng, o);
    await sleep(rng.int(100, 500));
  }
}

// ---------------------------------------------------------------- faults

export async function faults(w: World, rng: Rng, only: string[] | undefined): Promise<void> {
  const menu = ["kill9", "pg_restart", "audit_block", ...(w.chain ? CHAIN_FAULTS : [])];
  const kinds = menu.filter((k) => (!only || only.includes(k)) && (k !== "pg_restart" || w.db.restart));
  if (!kinds.length) return;
  await sleep(rng.int(3000, 6000));
  while (Date.now() < w.deadline - 4000) {
    const kind = rng.pick(kinds);
    const start = Date.now();
    let detail = "";
    try {
      if (kind === "kill9") {
        const r = rng.pick(w.replicas);
        detail = r.name;
        await r.kill9();
        await sleep(rng.int(500, 2500));
        await r.start();
      } else if (kind.startsWith("chain_") || kind === "kill9_settlement") {
        detail = await chainFault(w, rng, kind);
      } else if (kind === "pg_restart") {
        await w.db.restart!();
      } else {
        const ms = rng.int(1500, 4000);
        detail = `${ms} ms`;
        await withDb(w.db.url, (c) => c.query(`ALTER TABLE audit_records ADD CONSTRAINT chaos_block CHECK (false) NOT VALID`));
        await sleep(ms);
        await withDb(w.db.url, (c) => c.query(`ALTER TABLE audit_records DROP CONSTRAINT IF EXISTS chaos_block`));
      }
    } catch (err) {
      detail += ` error: ${err instanceof Error ? err.message : err}`;
    }
    w.faults.push({ kind, start, end: Date.now(), detail });
    w.log(`fault ${kind} ${detail} (${Date.now() - start} ms)`);
    await sleep(rng.int(3000, 8000));
  }
}

// ---------------------------------------------------------------- campaign

export async function runClients(w: World): Promise<void> {
  const tasks: Promise<void>[] = [];
  for (const o of w.owners) {
    tasks.push(payer(w, w.rng.fork(`payer-${o.index}-a`), o), payer(w, w.rng.fork(`payer-${o.index}-b`), o), follower(w, w.rng.fork(`follower-${o.index}`), o));
  }
  for (const p of w.partners) tasks.push(treasurer(w, w.rng.fork(`treasurer-${p.index}`), p), treasurer(w, w.rng.fork(`treasurer-${p.index}-b`), p));
  tasks.push(
    simulator(w, w.rng.fork("simulator")),
    budgetCreator(w, w.rng.fork("budgets")),
    revoker(w, w.rng.fork("revoker")),
    suspender(w, w.rng.fork("suspender")),
  );
  const only = process.env.CHAOS_FAULTS ? process.env.CHAOS_FAULTS.split(",") : undefined;
  tasks.push(faults(w, w.rng.fork("faults"), only));
  await Promise.all(tasks);
}

/**
 * After the faults: every replica up, audit writable, partners active; every operation that
 * never got a definitive answer is retried (identically) until it does, the audit
 * followers catch up and pending webhooks drain.
 */
export async function settle(w: World): Promise<{ unsettled: string[] }> {
  const rng = w.rng.fork("settle");
  await withDb(w.db.url, (c) => c.query(`ALTER TABLE audit_records DROP CONSTRAINT IF EXISTS chaos_block`));
  for (const r of w.replicas) if (!r.up) await r.start();
  await w.chain?.chain.heal();
  for (const p of w.partners) {
    if (p.status !== "active") {
      const open = w.suspensions.find((s) => s.partner === p.index && s.resumeStart === Infinity);
      if (open) open.resumeStart = Date.now();
      await admin(w, rng, (c) => c.partners.setPartnerStatus({ clientId: p.clientId, status: PartnerStatus.ACTIVE }));
      p.status = "active";
    }
  }
  const byOp = new Map<string, Attempt[]>();
  for (const a of w.history.attempts) if (a.kind === "payment" || a.kind === "batch" || a.kind === "budget") byOp.set(a.op, [...(byOp.get(a.op) ?? []), a]);
  const unsettled: string[] = [];
  for (const [op, attempts] of byOp) {
    if (attempts.some((a) => !unconfirmed(a))) continue;
    const first = attempts[0]!;
    const o = first.meta?.owner !== undefined ? w.owners[first.meta.owner as number] : undefined;
    const call = (): HttpCall => {
      const headers = { ...first.headers };
      // A payment or budget retry carries the owner's current bearer (the old grant may be dead).
      if (o && first.kind === "payment") headers.authorization = `Bearer ${o.agent.token}`;
      if (o && first.kind === "budget") headers.authorization = `Bearer ${o.owner.token}`;
      return { method: "POST", path: first.path, headers, body: first.body };
    };
    const last = await send(
      w,
      rng,
      op,
      first.kind,
      call,
      () => ({ ...first.meta, settle: true, grantId: first.kind === "payment" ? o?.agent.grantId : o?.owner.grantId }),
      10,
    );
    if (unconfirmed(last)) unsettled.push(op);
  }
  // Settlement writes audit records under the agents: the followers catch up after it.
  await settleChain(w);
  for (const o of w.owners) await followOnce(w, rng, o);
  // Webhooks: wait (bounded) until nothing is pending.
  const until = Date.now() + 20_000;
  while (Date.now() < until) {
    const { rows } = await withDb(w.db.url, (c) => c.query(`SELECT count(*)::int AS n FROM partner_events WHERE delivery_state = 'pending'`));
    if (rows[0].n === 0) break;
    await sleep(300);
  }
  await sleep(500);
  return { unsettled };
}

export { rpcError };
