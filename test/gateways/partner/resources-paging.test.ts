import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { createCursorCodec, loadInstanceSecret } from "../../../core/paging.js";
import { loadOpenApi, type OpenApiChecker } from "../../support/openapi.js";

describe("partner resources over HTTP: paging", () => {
  let stack: TestStack;
  let openapi: OpenApiChecker;

  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    openapi = await loadOpenApi(stack.url);
  });
  after(() => stack.close());

  /** Calls the API and checks the response against the served OpenAPI document. */
  async function call(method: string, path: string, options: Parameters<typeof api>[3] = {}): Promise<ApiResponse> {
    const res = await api(stack, method, path, options);
    openapi.check(method, path, res);
    expect(res.headers.get("x-request-id")).to.match(/^[0-9a-f-]{36}$/);
    return res;
  }

  describe("paging (transfers and events)", () => {
    it("pages with limit/cursor and resumes from the watermark without skipping or repeating while rows arrive", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const token = await mintPartnerToken(stack, partner);
      const record = (n: number) => stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: BigInt(n), currency: "USD" });
      for (let i = 1; i <= 5; i++) await record(i);
      const seen: number[] = [];
      let res = await call("GET", `/users/${userId}/transfers?limit=2`, { token });
      let page = res.body as { data: { amount_cents: number }[]; next_cursor: string | null; watermark: string };
      seen.push(...page.data.map((d) => d.amount_cents));
      let n = 6;
      while (page.next_cursor) {
        await record(n++); // a new row arrives mid-paging
        res = await call("GET", `/users/${userId}/transfers?limit=2&cursor=${encodeURIComponent(page.next_cursor)}`, { token });
        page = res.body as typeof page;
        seen.push(...page.data.map((d) => d.amount_cents));
      }
      await record(n++);
      res = await call("GET", `/users/${userId}/transfers?since=${encodeURIComponent(page.watermark)}&limit=100`, { token });
      seen.push(...(res.body as typeof page).data.map((d) => d.amount_cents));
      expect(seen).to.deep.equal(Array.from({ length: n - 1 }, (_, i) => i + 1));
    });

    it("never skips or repeats a row while concurrent writers commit during paging", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const token = await mintPartnerToken(stack, partner);
      const writes: Promise<unknown>[] = [];
      for (let i = 1; i <= 30; i++) writes.push(stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: BigInt(i) }));
      const seen: string[] = [];
      let query = "limit=3";
      let settled = false;
      const allWritten = Promise.all(writes).then(() => {
        settled = true;
      });
      for (;;) {
        const done = settled;
        const res = await call("GET", `/users/${userId}/transfers?${query}`, { token });
        const page = res.body as { data: { transfer_id: string }[]; next_cursor: string | null; watermark: string };
        seen.push(...page.data.map((d) => d.transfer_id));
        if (page.next_cursor) query = `limit=3&cursor=${encodeURIComponent(page.next_cursor)}`;
        else if (done && page.data.length === 0) break;
        else {
          query = `limit=3&since=${encodeURIComponent(page.watermark)}`;
          if (!done) await Promise.race([allWritten, new Promise((r) => setImmediate(r))]);
        }
      }
      expect(new Set(seen).size).to.equal(seen.length);
      expect(seen).to.have.length(30);
    });

    it("refuses a tampered cursor, another list's cursor and bad paging parameters", async () => {
      const partner = await createPartner(stack);
      const a = await createUserFor(stack, partner);
      const b = await createUserFor(stack, partner);
      const token = await mintPartnerToken(stack, partner);
      for (let i = 0; i < 3; i++) await stack.admin.partnerResources.recordLedgerEntry({ userId: a.userId, direction: "debit", amountCents: 5n });
      const first = (await call("GET", `/users/${a.userId}/transfers?limit=1`, { token })).body as { next_cursor: string; watermark: string };
      const tampered = first.next_cursor.slice(0, -2) + (first.next_cursor.endsWith("A") ? "BB" : "AA");
      expectHttpError(await call("GET", `/users/${a.userId}/transfers?cursor=${encodeURIComponent(tampered)}`, { token }), 400, "invalid_cursor");
      expectHttpError(await call("GET", `/users/${b.userId}/transfers?cursor=${encodeURIComponent(first.next_cursor)}`, { token }), 400, "invalid_cursor");
      expectHttpError(await call("GET", `/events?cursor=${encodeURIComponent(first.next_cursor)}`, { token }), 400, "invalid_cursor");
      expectHttpError(await call("GET", `/users/${a.userId}/transfers?cursor=${encodeURIComponent(first.watermark)}`, { token }), 400, "invalid_cursor");
      // A bad since is a bad query parameter: invalid_cursor would send the client back to that very since.
      const edited = first.watermark.slice(0, -2) + (first.watermark.endsWith("A") ? "BB" : "AA");
      for (const since of ["garbage", edited, first.next_cursor]) {
        expectHttpError(await call("GET", `/users/${a.userId}/transfers?since=${encodeURIComponent(since)}`, { token }), 400, "invalid_request");
      }
      expectHttpError(await call("GET", `/events?since=${encodeURIComponent(first.watermark)}`, { token }), 400, "invalid_request");
      expectHttpError(await call("GET", `/users/${a.userId}/transfers?limit=0`, { token }), 400, "invalid_request");
      // Empty values are omitted ones, for every paging parameter alike: the first page, 50 rows at most.
      for (const q of ["limit=", "cursor=", "since=", "limit=&cursor=&since="]) {
        const page = await call("GET", `/users/${a.userId}/transfers?${q}`, { token });
        expect(page.status, q).to.equal(200);
        expect(page.body, q).to.deep.equal((await call("GET", `/users/${a.userId}/transfers`, { token })).body);
      }
      expectHttpError(await call("GET", `/users/${a.userId}/transfers?limit=1&limit=2`, { token }), 400, "invalid_request");
      expectHttpError(await call("GET", `/users/${a.userId}/transfers?page=2`, { token }), 400, "invalid_request");
    });

    it("events: kyc.status_changed and transfer.settled/failed for consenting partners only", async () => {
      const partner = await createPartner(stack);
      const bystander = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      await createUserFor(stack, bystander);
      const token = await mintPartnerToken(stack, partner);
      // Ids as an operator may type them: events still carry the user's id as the API spells it.
      await stack.admin.partnerResources.setKycStatus({ userId: userId.toUpperCase(), status: "pending", provider: "sandbox" });
      await stack.admin.partnerResources.recordLedgerEntry({ userId: userId.toUpperCase(), direction: "credit", amountCents: 100n, status: "settled" });
      await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "debit", amountCents: 50n, status: "failed" });
      await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "debit", amountCents: 1n, status: "pending" });
      const res = await call("GET", "/events", { token });
      const events = (res.body as { data: { type: string; data: Record<string, unknown> }[] }).data;
      expect(events.map((e) => e.type)).to.deep.equal(["kyc.status_changed", "transfer.settled", "transfer.failed"]);
      expect(events[0]!.data).to.include({ user_id: userId, status: "pending" });
      expect(events[1]!.data).to.include({ user_id: userId });
      const theirs = await call("GET", "/events", { token: await mintPartnerToken(stack, bystander) });
      expect((theirs.body as { data: unknown[] }).data).to.deep.equal([]);
    });

    it("events: a token sees only the kinds its scopes cover (verification status with kyc:read, transfers with transfers:read)", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      await stack.admin.partnerResources.setKycStatus({ userId, status: "approved", provider: "sandbox" });
      await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 900n, status: "settled" });
      const typesWith = async (scope: string) => {
        const res = await call("GET", "/events", { token: await mintPartnerToken(stack, partner, scope) });
        expect(res.status, res.text).to.equal(200);
        return (res.body as { data: { type: string }[] }).data.map((e) => e.type);
      };
      expect(await typesWith("kyc:read transfers:read")).to.deep.equal(["kyc.status_changed", "transfer.settled"]);
      expect(await typesWith("kyc:read")).to.deep.equal(["kyc.status_changed"]);
      expect(await typesWith("transfers:read wallet:read")).to.deep.equal(["transfer.settled"]);
      // Hostile: a token minted narrow on purpose reads no amounts or statuses through the feed.
      expect(await typesWith("wallet:read")).to.deep.equal([]);
    });

    it("a signed watermark or cursor ahead of the feed (left by a database restore) is refused, not resumed from past unseen rows", async () => {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const token = await mintPartnerToken(stack, partner);
      const codec = createCursorCodec(await loadInstanceSecret(stack.core.db, "cursor"));
      const { rows } = await stack.core.db.raw(`SELECT (pg_snapshot_xmax(pg_current_snapshot())::text::numeric + 1000000)::text AS x`);
      const ahead = String((rows as { x: string }[])[0]!.x);
      const lists = [
        { path: "/events", b: `e:${partner.partnerId}` },
        { path: `/users/${userId}/transfers`, b: `t:${partner.partnerId}:${userId}` },
      ];
      for (const { path, b } of lists) {
        const since = codec.encode({ k: "w", b, a: 0, x: ahead });
        const cursor = codec.encode({ k: "c", b, a: 0, x: ahead });
        expectHttpError(await call("GET", `${path}?since=${encodeURIComponent(since)}`, { token }), 400, "invalid_request");
        expectHttpError(await call("GET", `${path}?cursor=${encodeURIComponent(cursor)}`, { token }), 400, "invalid_cursor");
      }
      // A position the feed has reached is still taken.
      const at = codec.encode({ k: "w", b: `e:${partner.partnerId}`, a: 0, x: "1" });
      expect((await call("GET", `/events?since=${encodeURIComponent(at)}`, { token })).status).to.equal(200);
    });
  });
});
