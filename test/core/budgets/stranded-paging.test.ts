import { randomBytes } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { createCursorCodec } from "../../../core/paging.js";
import { requirePostgres } from "../../support/db.js";
import { grpcCoreSuite, type WireResponse } from "../../support/grpc-core.js";
import { expectGrpcRefused, expectRefused } from "../../support/refusals.js";
import { closeAfterEveryoneElse, strandTogether as strandedTogether } from "../../support/stranded.js";

/**
 * BudgetsService.ListStrandedFunds pages with signed cursors, on core's real port (stock grpc-js).
 * The database is shared with other files: only this file's vaults are compared, over a full walk.
 */
describe("BudgetsService.ListStrandedFunds paging", () => {
  const suite = grpcCoreSuite({ provisioningLimitPerMinute: 1000 });
  const SERVICE = "vaultgate.budgets.v1.BudgetsService";

  const admin = () => {
    const md = new grpc.Metadata();
    md.set("authorization", `Bearer ${suite.stack.adminToken}`);
    return md;
  };
  const list = (req: { cursor?: string; limit?: number }) => suite.core.call(SERVICE, "ListStrandedFunds", req, admin());

  before(() => closeAfterEveryoneElse(suite.stack));
  const strandTogether = (n: number) => strandedTogether(suite.stack, n);

  /** Every page from the start, `limit` at a time; `between` runs after each page. The pages' vault ids in order. */
  async function walk(limit: number, between: (page: string[]) => Promise<void> = async () => {}): Promise<string[]> {
    const seen: string[] = [];
    let cursor = "";
    do {
      const res = (await list({ cursor, limit })) as WireResponse & { vaults: { vault_id: string }[]; next_cursor: string; more: boolean };
      expect(res.vaults.length).to.be.within(1, limit);
      expect(res.more, "more is set exactly when a next_cursor is").to.equal(res.next_cursor !== "");
      const page = res.vaults.map((v) => v.vault_id);
      seen.push(...page);
      cursor = res.next_cursor;
      await between(page);
    } while (cursor);
    return seen;
  }

  it("pages through every stranded vault exactly once, oldest close first then by vault id, also those stranded between pages", async () => {
    const first = await strandTogether(3);
    const second = await strandTogether(2);
    const mine = [...first, ...second];
    const late: string[][] = [];
    // Once the walk reaches this file's vaults, more are stranded (later closes) before the next page is asked for.
    const seen = await walk(2, async (page) => {
      if (late.length < 2 && page.some((v) => mine.includes(v) || late.flat().includes(v))) late.push(await strandTogether(2));
    });
    expect(late).to.have.length(2);
    const expected = [...mine, ...late.flat()];
    expect(seen.filter((v) => expected.includes(v))).to.deep.equal(expected);
    expect(new Set(seen).size, "no vault on two pages").to.equal(seen.length);
  });

  it("one page of at most 100 without a limit, its last page has no next_cursor; a limit above 100 is refused", async () => {
    const mine = await strandTogether(2);
    const res = (await list({})) as WireResponse & { vaults: { vault_id: string }[]; next_cursor: string; more: boolean };
    expect(res.vaults.length).to.be.within(1, 100);
    expect(res.more).to.equal(res.next_cursor !== "");
    expect(await walk(100)).to.include.members(mine);
    await expectGrpcRefused(list({ limit: 101 }), grpc.status.INVALID_ARGUMENT, /limit must be 0 or 1 to 100/);
  });

  it("refuses an altered, foreign or other list's cursor as invalid_argument naming the cursor", async () => {
    await strandTogether(2);
    const page = (await list({ limit: 1 })) as WireResponse & { next_cursor: string };
    const [body, sig] = page.next_cursor.split(".") as [string, string];
    const position = JSON.parse(Buffer.from(body, "base64url").toString()) as Record<string, string>;
    const moved = Buffer.from(JSON.stringify({ ...position, v: "00000000-0000-4000-8000-000000000000" })).toString("base64url");
    const foreign = createCursorCodec(randomBytes(32)).encode(position);
    const audit = (await suite.stack.admin.audit.listRecords({ limit: 1 })).nextCursor;
    expect(audit, "an audit page with a next_cursor").to.not.equal("");
    for (const cursor of [`${moved}.${sig}`, `${body}.${sig.slice(1)}x`, foreign, audit, "not-a-cursor", `${body}.${sig}.x`]) {
      await expectGrpcRefused(list({ cursor }), grpc.status.INVALID_ARGUMENT, /^cursor is malformed or not a next_cursor of this list$/);
      await expectRefused(suite.stack.admin.budgets.listStrandedFunds({ cursor }), Reason.INVALID_CURSOR, /cursor/);
    }
    // The genuine one still reads on.
    expect(((await list({ cursor: page.next_cursor, limit: 1 })) as { vaults: unknown[] }).vaults).to.have.length(1);
  });

  it("walkers paging while many budgets close at once each see every vault at most once, in (closed_at, vault_id) order (PostgreSQL only)", async function () {
    requirePostgres(this, "closes racing the walk need several connections");
    const before = await strandTogether(3);
    const racing: Promise<string[]>[] = [];
    const walks = await Promise.all(
      Array.from({ length: 3 }, () =>
        walk(2, async () => {
          if (racing.length < 6) racing.push(strandTogether(2));
        }),
      ),
    );
    const during = (await Promise.all(racing)).flat();
    const rows: { vault_id: string; closed_at: Date }[] = await suite.stack.core
      .db("budgets")
      .whereIn("vault_id", [...before, ...during])
      .select("vault_id", "closed_at");
    const at = new Map(rows.map((r) => [r.vault_id, new Date(r.closed_at).getTime()]));
    for (const seen of walks) {
      expect(new Set(seen).size, "no vault twice").to.equal(seen.length);
      expect(seen.filter((v) => before.includes(v))).to.deep.equal(before);
      const mine = seen.filter((v) => at.has(v));
      // Closes come from the stack's clock (whole milliseconds); ties go by vault id.
      const sorted = [...mine].sort((a, b) => at.get(a)! - at.get(b)! || (a < b ? -1 : 1));
      expect(mine).to.deep.equal(sorted);
    }
  });
});
