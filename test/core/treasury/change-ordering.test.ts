import { expect } from "chai";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { requirePostgres } from "../../support/db.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { batchRequest, bindTreasury, createRecipient, withToken } from "../../support/treasury.js";
import { reasonOf } from "../../support/refusals.js";

/**
 * A batch that waited for a lock sees what committed meanwhile: a suspension (access
 * ends at once) or a revoked payouts:receive consent stops it from paying.
 */
describe("TreasuryService.ExecuteBatch ordering against partner and consent changes", () => {
  let stack: TestStack;
  before(async function () {
    // Needs a second connection to hold the treasury lock; PGlite has exactly one.
    requirePostgres(this, "lock ordering needs several connections");
    stack = await startStack();
  });
  after(() => stack?.close());

  async function waitForLockWaiters(n: number, query: string) {
    for (let i = 0; i < 500; i++) {
      const { rows } = await stack.core.db.raw(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND query ILIKE ?`,
        [query],
      );
      if ((rows as { n: number }[])[0]!.n >= n) return;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error(`fewer than ${n} batches waited for a lock (${query})`);
  }
  const paidOf = async (partnerId: string) => {
    const { rows } = await stack.core.db.raw(
      `SELECT balance_cents, (SELECT count(*)::int FROM treasury_executions WHERE partner_id = ?) AS n FROM treasuries WHERE partner_id = ?`,
      [partnerId, partnerId],
    );
    return rows as unknown[];
  };

  it("batches waiting for the treasury when the partner is suspended pay nothing", async () => {
    const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["treasury:write"] }));
    const payer = await bindTreasury(stack.admin, partner, { balanceCents: 100_000n });
    const user = await createRecipient(stack.admin, partner);

    // Another transaction holds the treasury, as a long batch ahead of these would.
    const trx = await stack.core.db.transaction();
    await trx.raw(`SELECT 1 FROM treasuries WHERE partner_id = ? FOR UPDATE`, [partner.partnerId]);
    const batches = Array.from({ length: 10 }, () =>
      stack.clients.treasury.executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 500n }])).then(
        () => "paid" as const,
        (e: unknown) => reasonOf(e),
      ),
    );
    await waitForLockWaiters(10, "%treasuries%for update%");
    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.SUSPENDED });
    await trx.commit();

    expect(await Promise.all(batches)).to.deep.equal(Array.from({ length: 10 }, () => Reason.PARTNER_INACTIVE));
    expect(await paidOf(partner.partnerId)).to.deep.equal([{ balance_cents: 100_000, n: 0 }]);
  });

  it("batches waiting for a recipient whose payouts:receive is being revoked pay nothing once it commits", async () => {
    const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["treasury:write"] }));
    const payer = await bindTreasury(stack.admin, partner, { balanceCents: 100_000n });
    const user = await createRecipient(stack.admin, partner);

    // The revocation as RevokeConsent makes it: the user row locked, then the consent emptied.
    const trx = await stack.core.db.transaction();
    await trx.raw(`SELECT 1 FROM users WHERE id = ? FOR UPDATE`, [user]);
    await trx.raw(`UPDATE consents SET scopes = '{}' WHERE user_id = ? AND partner_id = ?`, [user, partner.partnerId]);
    const batches = Array.from({ length: 10 }, () =>
      stack.clients.treasury.executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 500n }])).then(
        () => "paid" as const,
        (e: unknown) => reasonOf(e),
      ),
    );
    await waitForLockWaiters(1, "%users%for key share%");
    await trx.commit();

    expect(await Promise.all(batches)).to.deep.equal(Array.from({ length: 10 }, () => Reason.GRANT_REQUIRED));
    expect(await paidOf(partner.partnerId)).to.deep.equal([{ balance_cents: 100_000, n: 0 }]);
  });
});
