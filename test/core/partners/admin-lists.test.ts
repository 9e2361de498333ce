import { Code } from "@connectrpc/connect";
import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";

/** PartnersService.ListPartners, ListUsers and GetUserByEmail: the operator's read-only views. */
describe("PartnersService admin lists", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ webhookPollMs: 0 });
  });
  after(() => stack.close());

  it("pages through every partner exactly once, oldest first, without secrets", async () => {
    const made: string[] = [];
    for (let i = 0; i < 5; i++) {
      made.push((await createPartner(stack)).clientId);
      stack.clock.advance(1000);
    }
    const seen: string[] = [];
    let cursor = "";
    let pages = 0;
    // The database is shared with the suites that ran before: page through all of it
    // (bounded, so a cursor that never ends fails instead of spinning).
    const total = Number((await stack.core.db("partners").count({ n: "*" }))[0]!.n);
    do {
      const res = await stack.admin.partners.listPartners({ limit: 2, cursor });
      expect(res.partners.length).to.be.at.most(2);
      seen.push(...res.partners.map((p) => p.clientId));
      for (const p of res.partners) expect(JSON.stringify(p)).to.not.match(/secret|scrypt/i);
      cursor = res.nextCursor;
      pages++;
    } while (cursor && pages <= total / 2 + 1);
    expect(cursor, "the last page has no next cursor").to.equal("");
    expect(new Set(seen).size).to.equal(seen.length);
    expect(seen.filter((id) => made.includes(id))).to.deep.equal(made);
  });

  it("pages through users with their root vaults, and finds one by e-mail in any case", async () => {
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const u = await stack.admin.partners.createUser({ email: `list-${i}-${crypto.randomUUID()}@example.test` });
      ids.push(u.userId);
      stack.clock.advance(1000);
    }
    const first = await stack.admin.partners.listUsers({ limit: 1 });
    expect(first.users).to.have.length(1);
    expect(first.nextCursor).to.not.equal("");
    const all = [...first.users];
    let cursor = first.nextCursor;
    while (cursor) {
      const page = await stack.admin.partners.listUsers({ limit: 200, cursor });
      all.push(...page.users);
      cursor = page.nextCursor;
    }
    const mine = all.filter((u) => ids.includes(u.userId));
    expect(mine.map((u) => u.userId)).to.deep.equal(ids);
    for (const u of mine) {
      expect(u.status).to.equal("active");
      expect(u.vaultId).to.match(/^[0-9a-f-]{36}$/);
      expect(Number.isNaN(Date.parse(u.createdAt))).to.equal(false);
    }

    const email = `Find-Me-${crypto.randomUUID()}@Example.test`;
    const created = await stack.admin.partners.createUser({ email });
    const found = await stack.admin.partners.getUserByEmail({ email: `  ${email.toUpperCase()} ` });
    expect(found.user).to.include({ userId: created.userId, vaultId: created.vaultId, email: email.toLowerCase(), status: "active" });
  });

  it("refuses a forged cursor, or one of another list, as invalid_cursor; a bad e-mail as invalid_request, an unknown one as not_found", async () => {
    for (let i = 0; i < 2; i++) await stack.admin.partners.createUser({ email: `cursor-${crypto.randomUUID()}@example.test` });
    const partners = (await stack.admin.partners.listPartners({ limit: 1 })).nextCursor;
    const users = (await stack.admin.partners.listUsers({ limit: 1 })).nextCursor;
    const stranded = Buffer.from(JSON.stringify({ l: "stranded", t: "2026-01-01", v: crypto.randomUUID() })).toString("base64url");
    // A cursor the old unsigned format produced names a row by its id alone: forgeable, so refused.
    const unsigned = Buffer.from(crypto.randomUUID()).toString("base64url");
    const [body, sig] = users.split(".");
    const altered = `${Buffer.from(JSON.stringify({ l: "users", i: crypto.randomUUID() })).toString("base64url")}.${sig}`;
    const forged = ["x", "not-base64!!", unsigned, `${stranded}.${sig}`, altered, `${body}.${sig}x`, "A".repeat(5000)];
    for (const cursor of [...forged, partners]) await expectRefused(stack.admin.partners.listUsers({ cursor }), Reason.INVALID_CURSOR);
    for (const cursor of [...forged, users]) await expectRefused(stack.admin.partners.listPartners({ cursor }), Reason.INVALID_CURSOR);
    for (const cursor of [partners, users]) await expectRefused(stack.admin.budgets.listStrandedFunds({ cursor }), Reason.INVALID_CURSOR);
    await expectRefused(stack.admin.partners.getUserByEmail({ email: "nope" }), Reason.INVALID_REQUEST);
    await expectRefused(stack.admin.partners.getUserByEmail({ email: `nobody-${crypto.randomUUID()}@example.test` }), Reason.NOT_FOUND);
  });

  it("derives a slug from an accented name; a name with nothing Latin asks for a slug", async () => {
    const accented = await stack.admin.partners.createPartner({ name: "Ünïcødé Straße" });
    expect(accented.partner!.clientId).to.match(/^gpc_unicode-strasse_[0-9a-f]{8}$/);
    await expectRefused(
      stack.admin.partners.createPartner({ name: "株式会社" }),
      Reason.INVALID_REQUEST,
      /^the name has no Latin letters or digits to make a slug of: give a slug/,
    );
    const named = await stack.admin.partners.createPartner({ name: "株式会社", slug: "kabushiki" });
    expect(named.partner!.clientId).to.match(/^gpc_kabushiki_/);
  });

  it("answers nothing without the operator credential", async () => {
    expect((await refusalOf(stack.clients.partners.listPartners({}))).code).to.equal(Code.Unauthenticated);
    expect((await refusalOf(stack.clients.partners.listUsers({}))).code).to.equal(Code.Unauthenticated);
    expect((await refusalOf(stack.clients.partners.getUserByEmail({ email: "a@example.test" }))).code).to.equal(Code.Unauthenticated);
  });
});
