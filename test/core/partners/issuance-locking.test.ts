import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { requirePostgres } from "../../support/db.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { expectRefused } from "../../support/refusals.js";

/**
 * Issuance locks the partner record through verification and signing, so a
 * suspension, rotation or entitlement change committed while an issuance waits for the
 * lock is what that issuance sees.
 */
describe("PartnersService.IssueToken ordering against partner changes", () => {
  let stack: TestStack;
  before(async function () {
    // Needs a second connection to hold the lock; PGlite has exactly one.
    requirePostgres(this, "lock ordering needs several connections");
    stack = await startStack();
  });
  after(() => stack?.close());

  /** Holds the partner row lock, starts an issuance, applies `change` in the lock holder, commits. */
  async function issueWhileLocked(clientId: string, clientSecret: string, change: string, scope?: string) {
    const db = stack.core.db;
    const trx = await db.transaction();
    await trx.raw(`SELECT 1 FROM partners WHERE client_id = ? FOR UPDATE`, [clientId]);
    const issuing = stack.clients.partners.issueToken({ clientId, clientSecret, scope });
    issuing.catch(() => {}); // the caller judges the outcome, once the change is committed
    // Let the issuance reach the lock (scrypt runs first, unlocked).
    await waitForLockWaiter(clientId);
    await trx.raw(change, [clientId]);
    await trx.commit();
    return issuing;
  }

  async function waitForLockWaiter(clientId: string) {
    for (let i = 0; i < 200; i++) {
      const { rows } = await stack.core.db.raw(
        `SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query ILIKE '%partners%for update%'`,
      );
      if ((rows as { n: number }[])[0]!.n > 0) return;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error(`issuance for ${clientId} never waited for the partner lock`);
  }

  it("an issuance waiting on the lock sees a suspension committed meanwhile", async () => {
    const p = await createPartner(stack);
    await expectRefused(issueWhileLocked(p.clientId, p.clientSecret, `UPDATE partners SET status = 'suspended' WHERE client_id = ?`), Reason.CLIENT_INACTIVE);
  });

  it("an issuance waiting on the lock fails closed after a rotation committed meanwhile", async () => {
    const p = await createPartner(stack);
    await expectRefused(
      issueWhileLocked(p.clientId, p.clientSecret, `UPDATE partners SET secret_hash = 'scrypt$1$1$1$AA$AA' WHERE client_id = ?`),
      Reason.INVALID_CLIENT,
    );
  });

  it("an issuance waiting on the lock uses entitlements changed meanwhile", async () => {
    const p = await createPartner(stack);
    const issued = await issueWhileLocked(p.clientId, p.clientSecret, `UPDATE partners SET entitlements = '{kyc:read}' WHERE client_id = ?`);
    expect(issued.scope).to.equal("kyc:read");
  });
});
