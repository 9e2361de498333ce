import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { startStack, type TestStack } from "../support/stack.js";
import { requirePostgres } from "../support/db.js";
import { grantFor, payment } from "../support/budgets.js";
import { fundedChild } from "../support/spend.js";
import { createPartner, mintPartnerToken } from "../support/partners.js";
import { createUserFor } from "../support/resources.js";
import { createRateLimitStore } from "../../core/rate-limits/store.js";
import { fixtures } from "../support/trust.js";
import { explainKit } from "../support/explain.js";

/**
 * Hot statements, captured as sent and EXPLAINed (custom and generic plans) on a database seeded to
 * thousands of rows per hot table. PostgreSQL only: the plans that matter are the server's, at size.
 */
describe("Hot statements use indexes on a seeded database (EXPLAIN, Postgres)", function () {
  this.timeout(180_000);
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "the plans asserted are PostgreSQL's, on a server-sized seeded database");
    // No webhook poller: a capture holds exactly the statements the calls below send. The
    // poller's query, caught when a poll happened to fall inside a capture, was checked by
    // chance, against whatever the shared test database held at that moment.
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
  });
  after(() => stack?.close());
  const { cleanup, seed, seedTokens, capture, expectIndexedPlans } = explainKit(() => stack);
  afterEach(cleanup);

  it("payments context (locked and group-committed), grant lookup, audit feed page, partner access batch and rate-limit hit: no sequential scan", async () => {
    const { child, token } = await fundedChild(stack, { perDay: 1_000_000n, lifetime: 10_000_000n });
    const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
    const kycUser = await createUserFor(stack, partner, ["kyc:read"]);
    const partnerToken = await mintPartnerToken(stack, partner, "kyc:read");
    await seed(partner.partnerId, child);
    await stack.clients.budgets.simulatePayment({ accessToken: token, payment: payment({ amountCents: 10n }) }); // warm up, outside the capture

    const statements = await capture(async () => {
      await stack.clients.budgets.simulatePayment({ accessToken: token, payment: payment({ amountCents: 10n }) });
      await stack.clients.budgets.initiatePayment({ accessToken: token, payment: payment({ amountCents: 10n }) });
      await stack.clients.budgets.getBalance({ accessToken: await grantFor(stack, child) });
      const page = await stack.clients.budgets.listGrantAudit({ accessToken: token, limit: 10 });
      await stack.clients.budgets.listGrantAudit({ accessToken: token, limit: 10, cursor: page.nextCursor });
      await stack.clients.partnerResources.getKycStatus({ accessToken: partnerToken, userId: kycUser.userId });
      await stack.clients.grants.startSignIn({ email: `nobody-${randomBytes(4).toString("hex")}@example.test` });
      await createRateLimitStore(stack.core.db).hit(`explain:${randomBytes(4).toString("hex")}`, 10, 60, stack.clock());
    });

    // Each hot path must be among the statements checked.
    const checked = await expectIndexedPlans(statements, [
      /FOR UPDATE OF v/, // payments.initiate: the locked context
      /unnest\([\s\S]*AS k\(grant_id, day_start/, // payments.simulate: the group-committed context
      /FROM grants g JOIN users u ON u.id = g.user_id WHERE g.id = \?/, // grant lookup
      /from "audit_records"/i, // audit feed page
      /partner_access_batch/, // partner access batch
      /INSERT INTO rate_limit_logs/, // rate-limit hit
      /vault_record_spend\(/, // the spend totals and the payment's ledger transaction
    ]);
    expect(checked.length).to.be.greaterThan(8);
  });

  it("token endpoints: code exchange and refresh (group-committed), a partner's client_credentials token: no sequential scan", async () => {
    const { child } = await fundedChild(stack, { perDay: 1_000_000n, lifetime: 10_000_000n });
    const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
    await seed(partner.partnerId, child);
    await seedTokens();
    await checkTokenEndpoints(partner);
  });

  it("a consent withdrawal and a deactivation find the user's events by index, not by walking the partner's", async () => {
    const { child } = await fundedChild(stack, { perDay: 1_000_000n, lifetime: 10_000_000n });
    const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
    const user = await createUserFor(stack, partner, ["kyc:read"]);
    await seed(partner.partnerId, child);
    await seedTokens();
    await stack.admin.partnerResources.setKycStatus({ userId: user.userId, status: "approved", provider: "sandbox" });
    const statements = await capture(async () => {
      await stack.admin.partnerResources.revokeConsent({ clientId: partner.clientId, userId: user.userId });
      await stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "inactive" });
    });
    await expectIndexedPlans(statements, [/DELETE FROM partner_events WHERE partner_id/, /DELETE FROM partner_events WHERE lower/]);
  });

  async function checkTokenEndpoints(partner: Awaited<ReturnType<typeof createPartner>>) {
    const f = fixtures(stack);
    const user = await f.user();
    const client = await f.oauthClient("accounts:read");
    const { code, verifier } = await f.authorizationCode(user, client);
    const other = await f.clientGrant(user, client); // warms the client's secret check, outside the capture

    const statements = await capture(async () => {
      const exchanged = await stack.clients.grants.exchangeCode({
        clientId: client.clientId,
        clientSecret: client.clientSecret,
        code,
        redirectUri: client.redirectUri,
        codeVerifier: verifier,
      });
      await stack.clients.grants.refreshGrant({ refreshToken: exchanged.token!.refreshToken, clientId: client.clientId, clientSecret: client.clientSecret });
      await stack.clients.grants.refreshGrant({ refreshToken: other.refreshToken, clientId: client.clientId, clientSecret: client.clientSecret });
      await stack.clients.partners.issueToken({ clientId: partner.clientId, clientSecret: partner.clientSecret, scope: "kyc:read" });
    });

    // Each hot path must be among the statements checked.
    await expectIndexedPlans(statements, [
      /grant_exchange_batch/, // the exchange's fast path: code, grant and audit row in one statement
      /grant_refresh_batch/, // the refresh's fast path: old grant, successor and audit row
      /\bpartners\b/, // the client_credentials grant reads its partner
    ]);
  }
});
