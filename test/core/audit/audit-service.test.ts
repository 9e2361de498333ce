import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { Outcome } from "../../../gen/vaultgate/audit/v1/audit_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { feedsSettled } from "../../support/db.js";
import { expectRefused } from "../../support/refusals.js";

describe("AuditService", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  async function failedIssuances(clientId: string, n: number) {
    for (let i = 0; i < n; i++) await stack.clients.partners.issueToken({ clientId, clientSecret: "wrong" }).catch(() => undefined);
  }

  it("pages with an opaque cursor and resumes strictly after a since watermark", async () => {
    const p = await createPartner(stack);
    await failedIssuances(p.clientId, 5);
    const actor = `partner:${p.clientId}`;
    await feedsSettled(stack.core.db); // another database's open transaction can hold the feed back
    const first = await stack.admin.audit.listRecords({ actor, limit: 2 });
    expect(first.records).to.have.length(2);
    expect(first.nextCursor).to.not.equal("");
    const second = await stack.admin.audit.listRecords({ actor, limit: 2, cursor: first.nextCursor });
    const third = await stack.admin.audit.listRecords({ actor, limit: 2, cursor: second.nextCursor });
    const all = [...first.records, ...second.records, ...third.records];
    expect(all).to.have.length(5);
    expect(third.nextCursor).to.equal("");
    expect(new Set(all.map((r) => r.recordId)).size).to.equal(5);
    expect(all.every((r) => r.outcome === Outcome.FAILURE && r.reason === "invalid_client" && r.action === "partner.token.issue")).to.equal(true);

    const since = await stack.admin.audit.listRecords({ actor, since: all[2]!.recordId });
    expect(since.records.map((r) => r.recordId)).to.deep.equal(all.slice(3).map((r) => r.recordId));
  });

  it("refuses a tampered cursor (invalid_cursor) and a malformed watermark (invalid_request)", async () => {
    const p = await createPartner(stack);
    await failedIssuances(p.clientId, 3);
    const { nextCursor } = await stack.admin.audit.listRecords({ actor: `partner:${p.clientId}`, limit: 1 });
    const [body, sig] = nextCursor.split(".");
    const forged = Buffer.from(JSON.stringify({ a: 0 })).toString("base64url");
    for (const cursor of [`${forged}.${sig}`, `${body}.AAAA`, "garbage"]) {
      await expectRefused(stack.admin.audit.listRecords({ cursor }), Reason.INVALID_CURSOR);
    }
    await expectRefused(stack.admin.audit.listRecords({ since: "abc" }), Reason.INVALID_REQUEST);
    await expectRefused(stack.admin.audit.listRecords({ cursor: nextCursor, since: "0" }), Reason.INVALID_REQUEST, /cursor or since, not both/);
  });

  it("streams new records to a tail as they land", async () => {
    const p = await createPartner(stack);
    const actor = `partner:${p.clientId}`;
    // From a watermark read first: a tail without one starts wherever the server is when it reads it.
    const { watermark } = await stack.admin.audit.listRecords({ actor });
    expect(watermark).to.match(/^\d+\.\d+$/);
    const controller = new AbortController();
    const stream = stack.admin.audit.tailRecords({ actor, since: watermark }, { signal: controller.signal });
    const received: string[] = [];
    const reading = (async () => {
      try {
        for await (const { record } of stream) {
          received.push(record!.reason);
          if (received.length === 2) controller.abort();
        }
      } catch (e) {
        if (!controller.signal.aborted) throw e;
      }
    })();
    await failedIssuances(p.clientId, 2);
    await reading;
    expect(received).to.deep.equal(["invalid_client", "invalid_client"]);
  });

  it("refuses a watermark ahead of the feed, which would skip every record until the feed caught up", async () => {
    const p = await createPartner(stack);
    const actor = `partner:${p.clientId}`;
    const { watermark } = await stack.admin.audit.listRecords({ actor });
    const [xid] = watermark.split(".");
    const ahead = `${BigInt(xid!) + 1_000_000n}.1`;
    await expectRefused(stack.admin.audit.listRecords({ actor, since: ahead }), Reason.INVALID_REQUEST, /since/);
    const tail = stack.admin.audit.tailRecords({ actor, since: ahead });
    await expectRefused(
      (async () => {
        for await (const _ of tail) break;
      })(),
      Reason.INVALID_REQUEST,
      /since/,
    );
    // The watermark it was given still resumes: the next record arrives.
    await failedIssuances(p.clientId, 1);
    await feedsSettled(stack.core.db);
    expect((await stack.admin.audit.listRecords({ actor, since: watermark })).records.map((r) => r.reason)).to.deep.equal(["invalid_client"]);
  });

  it("is only for the operator", async () => {
    await expectRefused(stack.clients.audit.listRecords({}), Reason.ADMIN_UNAUTHENTICATED);
  });
});

describe("audit_records", () => {
  it("refuses updates and deletes at the database", async () => {
    const stack = await startStack();
    try {
      await createPartner(stack);
      for (const sql of ["UPDATE audit_records SET actor = 'x'", "DELETE FROM audit_records", "TRUNCATE audit_records"]) {
        const err = await stack.core.db.raw(sql).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(String(err)).to.match(/append-only/);
      }
    } finally {
      await stack.close();
    }
  });
});
