import { randomUUID } from "node:crypto";
import { expect } from "chai";
import type { Knex } from "knex";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { requirePostgres } from "../../support/db.js";
import { postRpc } from "../../support/mcp.js";
import { createOwner, grantFor } from "../../support/budgets.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor } from "../../support/resources.js";
import { createAuditStore } from "../../../core/audit/store.js";
import { enqueue } from "../../../core/partners/webhooks/outbox-store.js";
import { createCursorCodec, formatWatermark, loadInstanceSecret } from "../../../core/paging.js";
import { createTreasuryStore } from "../../../core/treasury/store.js";
import { payoutTransferId } from "../../../core/ledger/treasury.js";
import { movementCtes } from "../../../core/ledger/store.js";
import { insertTransferEntry } from "../../../core/ledger/transfers.js";
import { externalAccount, userAccount } from "../../../core/ledger/accounts.js";
import { expectRefused } from "../../support/refusals.js";

const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * One change feed as a follower sees it through its real surface, and a writer that adds
 * one row to it inside a given transaction (the code path the product writes it with).
 */
interface Feed {
  /** Adds one row in `trx`; resolves to the id the feed reports for it. */
  write(trx: Knex.Transaction): Promise<string>;
  /** One read strictly after `since` ("" = the beginning). */
  read(since: string, limit: number): Promise<{ ids: string[]; watermark: string }>;
}

/**
 * A follower: reads from `since`, always resuming from the watermark it was given, until
 * `done(seen)` holds (bounded: other transactions on a shared server may hold the
 * horizon back for a moment). Returns every id in the order received, repeats included.
 */
async function follow(feed: Feed, since: string, done: (seen: string[]) => boolean, limit = 3, seen: string[] = []) {
  let watermark = since;
  for (let round = 0; round < 400 && !done(seen); round++) {
    const page = await feed.read(watermark, limit);
    seen.push(...page.ids);
    watermark = page.watermark;
    if (page.ids.length === 0) await pause(25);
  }
  return { seen, watermark };
}

const hasAll = (ids: string[]) => (seen: string[]) => ids.every((id) => seen.includes(id));

describe("change feeds: every committed row reaches a watermark follower exactly once", () => {
  let stack: TestStack;
  let auditStore: ReturnType<typeof createAuditStore>;
  let treasuries: ReturnType<typeof createTreasuryStore>;

  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    auditStore = createAuditStore(stack.core.db);
    treasuries = createTreasuryStore(stack.core.db);
  });
  after(() => stack.close());

  /** audit.list over HTTP JSON-RPC (/mcp/read, direct method), as the agent. */
  async function agentAuditFeed(): Promise<Feed & { actor: string; token: string }> {
    const owner = await createOwner(stack);
    const token = await grantFor(stack, owner);
    const actor = `agent:${owner.agentPrincipalId}`;
    return {
      actor,
      token,
      write: async (trx) =>
        String(await auditStore.append(trx, { requestId: randomUUID(), actor, action: "feed.test", outcome: "success", subject: "s", at: stack.clock() })),
      async read(since, limit) {
        const res = await postRpc(
          `${stack.url}/mcp/read`,
          { jsonrpc: "2.0", id: 1, method: "audit.list", params: { since, limit } },
          { authorization: `Bearer ${token}` },
        );
        const result = res.json!.result as { records: { record_id: string; action: string }[]; watermark: string };
        expect(result, res.text).to.not.equal(undefined);
        return { ids: result.records.filter((r) => r.action === "feed.test").map((r) => r.record_id), watermark: result.watermark };
      },
    };
  }

  /** AuditService.ListRecords as the operator, filtered to one actor. */
  function operatorAuditFeed(): Feed & { actor: string } {
    const actor = `feedtest:${randomUUID()}`;
    return {
      actor,
      write: async (trx) =>
        String(await auditStore.append(trx, { requestId: randomUUID(), actor, action: "feed.test", outcome: "success", at: stack.clock() })),
      async read(since, limit) {
        const res = await stack.admin.audit.listRecords({ actor, since, limit });
        return { ids: res.records.map((r) => r.recordId), watermark: res.watermark };
      },
    };
  }

  /** GET /api/partner/events. */
  async function eventsFeed(): Promise<Feed> {
    const partner = await createPartner(stack);
    const token = await mintPartnerToken(stack, partner);
    return {
      write: async (trx) => (await enqueue(trx, partner.partnerId, "kyc.status_changed", { n: randomUUID() }, stack.clock())).eventId,
      async read(since, limit) {
        const res = await api(stack, "GET", `/events?limit=${limit}${since ? `&since=${encodeURIComponent(since)}` : ""}`, { token });
        expect(res.status, res.text).to.equal(200);
        const body = res.body as { data: { event_id: string }[]; watermark: string };
        return { ids: body.data.map((e) => e.event_id), watermark: body.watermark };
      },
    };
  }

  /**
   * GET /api/partner/users/<id>/transfers, written by the two writers of a user's
   * transfers in turn: a recorded entry (ledger_entries), then a payout to the user
   * (treasury_executions, as a batch inserts it), and so on, also within one transaction.
   */
  async function transfersFeed(): Promise<Feed> {
    const partner = await createPartner(stack);
    const { userId } = await createUserFor(stack, partner);
    const token = await mintPartnerToken(stack, partner);
    // Open the user's ledger account (and external:transfers) first, as the first settled transfer would: these
    // writers bypass the per-user lock that orders real writers, and a second writer opening
    // the same new account would wait for the first to commit.
    await stack.core.db.raw(
      `INSERT INTO ledger_accounts (id, kind, owner, currency, created_at)
       VALUES (ledger_account_id('user', ?, 'USD'), 'user', ?, 'USD', now()), (ledger_account_id('external', 'transfers', 'USD'), 'external', 'transfers', 'USD', now())
       ON CONFLICT DO NOTHING`,
      [userId, userId],
    );
    let writes = 0;
    return {
      async write(trx) {
        const at = stack.clock();
        if (writes++ % 2 === 1) {
          const executionId = `ex-${randomUUID()}`;
          const execution = { partnerId: partner.partnerId, executionId, payoutId: `po-${randomUUID()}`, batchId: randomUUID(), recipientUserId: userId };
          await treasuries.insertExecutions(trx, [
            { ...execution, payerEntityId: randomUUID(), amountCents: 1, currency: "USD", reference: "feed", executedAt: at },
          ]);
          // And the credit a batch posts with it, so the shared database still passes
          // `ledger verify` for the tests that run after this one.
          const credit = movementCtes({
            id: randomUUID(),
            kind: "transfer",
            reference: `feed:${executionId}`,
            at,
            legs: [
              { account: userAccount(userId, "USD"), amountCents: 1 },
              { account: externalAccount("transfers", "USD"), amountCents: -1 },
            ],
          });
          await trx.raw(`WITH ${credit.sql} SELECT 1`, credit.bindings);
          return payoutTransferId(partner.partnerId, executionId);
        }
        const e = await insertTransferEntry(trx, {
          id: randomUUID(),
          userId,
          direction: "credit",
          amountCents: 1,
          currency: "USD",
          status: "settled",
          createdAt: at,
          updatedAt: at,
        });
        return e.id;
      },
      async read(since, limit) {
        const res = await api(stack, "GET", `/users/${userId}/transfers?limit=${limit}${since ? `&since=${encodeURIComponent(since)}` : ""}`, { token });
        expect(res.status, res.text).to.equal(200);
        const body = res.body as { data: { transfer_id: string }[]; watermark: string };
        return { ids: body.data.map((t) => t.transfer_id), watermark: body.watermark };
      },
    };
  }

  const feeds: [string, () => Promise<Feed>][] = [
    ["audit.list (JSON-RPC)", agentAuditFeed],
    ["AuditService.ListRecords", async () => operatorAuditFeed()],
    ["partner events (REST)", eventsFeed],
    ["partner transfers (REST)", transfersFeed],
  ];

  describe("late commit (Postgres)", () => {
    before(function () {
      requirePostgres(this, "interleaved transactions need several connections");
    });

    for (const [name, make] of feeds) {
      it(`${name}: a row inserted earlier but committed later is returned once, after the later row's watermark`, async () => {
        const feed = await make();
        const db = stack.core.db;
        const slow = await db.transaction();
        let early: string;
        try {
          early = await feed.write(slow);
          const late = await db.transaction((trx) => feed.write(trx));
          // The auditor's case: for audit the ids are the seqs, and the earlier one commits last.
          if (/^\d+$/.test(early)) expect(Number(early)).to.be.lessThan(Number(late));
          // While the earlier row's transaction is open the later row is held back: a
          // watermark past it would skip the earlier row for good.
          const before = await feed.read("", 100);
          expect(before.ids).to.deep.equal([]);
          await slow.commit();
          const after = await follow(feed, before.watermark, hasAll([early, late]));
          expect(after.seen).to.deep.equal([early, late]);
          // Nothing comes twice: the feed is quiet after the last watermark.
          expect((await feed.read(after.watermark, 100)).ids).to.deep.equal([]);
        } finally {
          if (!slow.isCompleted()) await slow.rollback();
        }
      });
    }

    it("AuditService.TailRecords delivers a late-committing record, then resumes from a watermark without repeats", async () => {
      const feed = operatorAuditFeed();
      const db = stack.core.db;
      // Where a tail without `since` would start, taken before any of the rows below exists.
      const since = formatWatermark(await auditStore.horizon());
      const sentinel = await db.transaction();
      const slow = await db.transaction();
      const controller = new AbortController();
      try {
        // The sentinel's transaction writes first, so its xid sorts before the early row's.
        const marker = await feed.write(sentinel);
        const early = await feed.write(slow);
        const stream = stack.admin.audit.tailRecords({ actor: feed.actor, since }, { signal: controller.signal });
        const received: { id: string; watermark: string }[] = [];
        let sawFirst: () => void = () => {};
        const first = new Promise<void>((resolve) => {
          sawFirst = resolve;
        });
        const reading = (async () => {
          try {
            for await (const { record, watermark } of stream) {
              received.push({ id: record!.recordId, watermark });
              if (received.length === 1) sawFirst();
              // The later row (or anything unexpected) ends the read: nothing may follow it.
              if (record!.recordId !== marker && record!.recordId !== early) controller.abort();
            }
          } catch (e) {
            if (!controller.signal.aborted) throw e;
          }
        })();
        const late = await db.transaction((trx) => feed.write(trx));
        await sentinel.commit();
        // The marker can only come from a poll after the later row committed, while the early
        // row is still open: had that poll handed out the later row, it would precede the early one.
        await first;
        await slow.commit();
        await reading;
        expect(received.map((r) => r.id)).to.deep.equal([marker, early, late]);

        // A reconnecting tail resumes strictly after the early record's watermark.
        const third = await db.transaction((trx) => feed.write(trx));
        const resumed = new AbortController();
        const again: string[] = [];
        try {
          for await (const { record } of stack.admin.audit.tailRecords({ actor: feed.actor, since: received[1]!.watermark }, { signal: resumed.signal })) {
            again.push(record!.recordId);
            if (again.length === 2) resumed.abort();
          }
        } catch (e) {
          if (!resumed.signal.aborted) throw e;
        }
        expect(again).to.deep.equal([late, third]);
      } finally {
        controller.abort();
        for (const trx of [sentinel, slow]) if (!trx.isCompleted()) await trx.rollback();
      }
    });
  });

  describe("many writers, one follower (Postgres)", () => {
    before(function () {
      requirePostgres(this, "interleaved transactions need several connections");
    });

    for (const [name, make] of feeds) {
      it(`${name}: the follower's union is exactly the committed set, without repeats`, async () => {
        const feed = await make();
        const committed: string[] = [];
        const rolledBack: string[] = [];
        let writing = true;
        const writers = Array.from({ length: 8 }, async (_, w) => {
          for (let t = 0; t < 4; t++) {
            const ids: string[] = [];
            const abort = (w + t) % 4 === 0;
            await stack.core.db
              .transaction(async (trx) => {
                for (let r = 0; r < 3; r++) {
                  ids.push(await feed.write(trx));
                  await pause((w * 7 + t * 3 + r) % 11); // interleave commits out of insert order
                }
                if (abort) throw new Error("rolled back on purpose");
              })
              .then(
                () => committed.push(...ids),
                () => rolledBack.push(...ids),
              );
          }
        });
        const done = Promise.all(writers).then(() => {
          writing = false;
        });
        const seen: string[] = [];
        let watermark = "";
        while (writing) {
          const page = await feed.read(watermark, 5);
          seen.push(...page.ids);
          watermark = page.watermark;
          if (page.ids.length === 0) await pause(5);
        }
        await done;
        // Writers are done: keep following from the watermark until every committed row came.
        const { watermark: last } = await follow(feed, watermark, () => hasAll(committed)(seen), 5, seen);
        expect(new Set(seen).size, "no row twice").to.equal(seen.length);
        expect([...seen].sort()).to.deep.equal([...committed].sort());
        expect(rolledBack.length).to.be.greaterThan(0);
        expect((await feed.read(last, 100)).ids).to.deep.equal([]);
      });
    }
  });

  describe("watermark format and compatibility", () => {
    it("audit.list: watermarks are <xid>.<seq>; a bare record_id of the agent's own feed still works; anything else is invalid params", async () => {
      const feed = await agentAuditFeed();
      const ids: string[] = [];
      for (let i = 0; i < 3; i++) ids.push(await stack.core.db.transaction((trx) => feed.write(trx)));
      const all = await follow(feed, "", hasAll(ids), 100);
      expect(all.seen).to.deep.equal(ids);
      expect(all.watermark).to.match(/^\d+\.\d+$/);
      expect((await feed.read(ids[0]!, 100)).ids).to.deep.equal(ids.slice(1));
      expect((await feed.read("0", 100)).ids).to.deep.equal(ids);

      const other = await agentAuditFeed();
      const foreign = await stack.core.db.transaction((trx) => other.write(trx));
      for (const since of [foreign, "999999999999", "abc", "1.2.3", "99999999999999999999.1", "999999999999.1"]) {
        const res = await postRpc(
          `${stack.url}/mcp/read`,
          { jsonrpc: "2.0", id: 1, method: "audit.list", params: { since } },
          { authorization: `Bearer ${feed.token}` },
        );
        expect([res.json!.error?.code, res.json!.error?.data?.reason_id], since).to.deep.equal([-32602, "invalid_params"]);
      }
    });

    it("audit: records written before the feed horizon (xid 0) keep their order and old record_id watermarks", async () => {
      const actor = `legacy:${randomUUID()}`;
      const legacy: string[] = [];
      for (let i = 0; i < 2; i++) {
        const { rows } = await stack.core.db.raw(
          `INSERT INTO audit_records (request_id, actor, action, outcome, created_at, xid) VALUES (?, ?, 'feed.test', 'success', ?, '0') RETURNING seq`,
          [randomUUID(), actor, stack.clock()],
        );
        legacy.push(String((rows as { seq: string }[])[0]!.seq));
      }
      const fresh = String(
        await auditStore.append(stack.core.db, { requestId: randomUUID(), actor, action: "feed.test", outcome: "success", at: stack.clock() }),
      );
      const list = (since: string) => stack.admin.audit.listRecords({ actor, since, limit: 100 });
      expect((await list("")).records.map((r) => r.recordId)).to.deep.equal([...legacy, fresh]);
      expect((await list(legacy[0]!)).records.map((r) => r.recordId)).to.deep.equal([legacy[1], fresh]);
      expect((await list(`0.${legacy[1]}`)).records.map((r) => r.recordId)).to.deep.equal([fresh]);
      await expectRefused(list("12.x"), Reason.INVALID_REQUEST);
    });

    it("partner feeds: a watermark signed before the feed horizon (no xid) still resumes correctly", async () => {
      const partner = await createPartner(stack);
      const token = await mintPartnerToken(stack, partner);
      const ids: string[] = [];
      for (let i = 0; i < 2; i++)
        ids.push(await stack.core.db.transaction(async (trx) => (await enqueue(trx, partner.partnerId, "kyc.status_changed", { i }, stack.clock())).eventId));
      const codec = createCursorCodec(await loadInstanceSecret(stack.core.db, "cursor"));
      const old = codec.encode({ k: "w", b: `e:${partner.partnerId}`, a: 0 });
      const res = await api(stack, "GET", `/events?since=${encodeURIComponent(old)}`, { token });
      expect(res.status, res.text).to.equal(200);
      expect((res.body as { data: { event_id: string }[] }).data.map((e) => e.event_id)).to.deep.equal(ids);
      const forged = codec.encode({ k: "w", b: `e:${partner.partnerId}`, a: 0, x: "not-a-number" });
      expect((await api(stack, "GET", `/events?since=${encodeURIComponent(forged)}`, { token })).status).to.equal(400);
    });
  });
});
