import { expect } from "chai";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { requirePostgres } from "../../support/db.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";

/** A pre-create that passed its access check and a suspension committing meanwhile: the suspension wins. */
describe("partner user pre-creation ordered against suspension (PostgreSQL only)", () => {
  let stack: TestStack;
  before(async function () {
    // Needs a second connection to hold the partner row; PGlite has exactly one.
    requirePostgres(this, "lock ordering needs several connections");
    stack = await startStack({ gateway: true });
  });
  after(() => stack?.close());

  async function waitForLockWaiters(n: number) {
    for (let i = 0; i < 500; i++) {
      const { rows } = await stack.core.db.raw(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE '%partners%for share%'`,
      );
      if ((rows as { n: number }[])[0]!.n >= n) return;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error(`fewer than ${n} pre-creates waited for the partner row`);
  }

  it("pre-creates waiting while a suspension commits answer 403 partner_inactive and create nothing; another partner's succeed", async () => {
    const partner = await createPartner(stack);
    const other = await createPartner(stack);
    const [token, otherToken] = await Promise.all([mintPartnerToken(stack, partner), mintPartnerToken(stack, other)]);
    const preCreate = (t: string, email: string) =>
      fetch(`${stack.url}/api/partner/users`, {
        method: "POST",
        headers: { authorization: `Bearer ${t}`, "content-type": "application/json" },
        body: JSON.stringify({ email }),
      });

    // The suspension as SetPartnerStatus makes it, held open while the pre-creates arrive.
    const trx = await stack.core.db.transaction();
    await trx.raw(`SELECT 1 FROM partners WHERE id = ? FOR UPDATE`, [partner.partnerId]);
    const emails = Array.from({ length: 12 }, (_, i) => `held-${i}-${partner.partnerId.slice(0, 8)}@example.com`);
    const held = emails.map((e) => preCreate(token, e));
    await waitForLockWaiters(emails.length).catch(async (err) => {
      await trx.rollback();
      throw err;
    });
    const unaffected = await preCreate(otherToken, `free-${other.partnerId.slice(0, 8)}@example.com`);
    await trx.raw(`UPDATE partners SET status = 'suspended' WHERE id = ?`, [partner.partnerId]);
    await trx.commit();

    const answers = await Promise.all(
      held.map(async (r) => ({ status: (await r).status, code: ((await (await r).json()) as { error?: { code: string } }).error?.code })),
    );
    expect(answers).to.deep.equal(emails.map(() => ({ status: 403, code: "partner_inactive" })));
    expect(unaffected.status).to.equal(201);
    const receipts = await stack.core.db("partner_users").where({ partner_id: partner.partnerId });
    expect(receipts).to.have.length(0);
    const audited = await stack.core.db("audit_records").where({ actor: `partner:${partner.clientId}`, action: "partner.users.create", outcome: "failure" });
    expect(audited).to.have.length(emails.length);
    // Reactivated, the same requests go through.
    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.ACTIVE });
    expect((await preCreate(token, emails[0]!)).status).to.equal(201);
  });
});
