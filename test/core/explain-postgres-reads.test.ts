import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { startStack, type TestStack } from "../support/stack.js";
import { requirePostgres } from "../support/db.js";
import { payment } from "../support/budgets.js";
import { fundedChild } from "../support/spend.js";
import type { TestPartner } from "../support/partners.js";
import { createUserFor } from "../support/resources.js";
import { fixtures, type Fixtures } from "../support/trust.js";
import { batchRequest, bindTreasury, createRecipient } from "../support/treasury.js";
import { startWebhookReceiver } from "../support/webhook-receiver.js";
import { explainKit, seqScans } from "../support/explain.js";

/** The plans of the read paths, webhook delivery, payouts and the pruner on a seeded database (PostgreSQL only, as the hot-path suite). */
describe("Hot statements use indexes on a seeded database: reads, deliveries and pruning (EXPLAIN, Postgres)", function () {
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
  const { cleanups, cleanup, seed, seedTokens, capture, explain, expectIndexedPlans } = explainKit(() => stack);
  afterEach(cleanup);

  it("partner reads and feeds, webhook delivery, treasury payouts, budgets and the owner's pages: no sequential scan", async () => {
    const f = fixtures(stack);
    const { child } = await fundedChild(stack, { perDay: 1_000_000n, lifetime: 10_000_000n });
    const partner = await f.partner();
    await seed(partner.partnerId, child);
    await seedTokens();
    await checkPartnerAndOwnerPaths(f, partner);
  });

  async function checkPartnerAndOwnerPaths(f: Fixtures, partner: TestPartner & { token: string }) {
    // The partner's user, with a wallet, a US account and a settled transfer to read.
    const { userId } = await createUserFor(stack, partner, ["kyc:read", "wallet:read", "us_account:read", "transfers:read"]);
    await stack.admin.partnerResources.addWallet({ userId, chain: "base", address: "0x52908400098527886E0F7030069857D2E4169EE7" });
    await stack.admin.partnerResources.provisionUsAccount({ userId });
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 500n });
    // Webhooks go to a second partner, so the seeded partner never has anything to deliver.
    const hooked = await f.partner();
    const receiver = await startWebhookReceiver();
    cleanups.push(() => receiver.close());
    await stack.admin.partnerResources.setWebhook({ clientId: hooked.clientId, url: receiver.url });
    const hookedUser = await createUserFor(stack, hooked, ["kyc:read"]);
    const payer = await bindTreasury(stack.admin, partner);
    const recipient = await createRecipient(stack.admin, partner);
    const payout = batchRequest(partner, payer, [{ recipientUserId: recipient, amountCents: 100n }]);
    // An owner with a stepped-up session, two drafts to activate and decline, and an active budget to fund and close.
    const owner = await f.user();
    const session = await f.steppedUpSession(owner);
    await stack.admin.budgets.fundVault({ vaultId: owner.vaultId, amountCents: 100_000n });
    const toActivate = await f.budget(owner, { stepUp: false });
    const toDecline = await f.budget(owner, { stepUp: false });
    const active = await f.budget(owner, { stepUp: true });
    const parentGrant = await f.grant(owner, { stepUp: true });
    const pending = await f.pendingPayment(owner);
    const client = await f.oauthClient("accounts:read");
    const consent = f.authRequest(client, { vaultId: owner.vaultId });
    await stack.clients.partnerResources.listEvents({ accessToken: partner.token }); // warm up, outside the capture

    const statements = await capture(async () => {
      await stack.clients.partnerResources.listWallets({ accessToken: partner.token, userId });
      await stack.clients.partnerResources.getUsAccount({ accessToken: partner.token, userId });
      await stack.clients.partnerResources.listTransfers({ accessToken: partner.token, userId });
      await stack.clients.partnerResources.listEvents({ accessToken: partner.token });
      await stack.clients.partnerResources.authorizePartner({ accessToken: partner.token, userId, scope: "kyc:read" });
      await stack.clients.partnerResources.preCreateUser({ accessToken: partner.token, email: `explain-${randomBytes(4).toString("hex")}@example.test` });
      await stack.clients.partnerResources.createKycLink({ accessToken: partner.token, userId, provider: "", redirectUri: "" });
      await stack.admin.partnerResources.setKycStatus({ userId: hookedUser.userId, status: "approved", provider: "sandbox" });
      await stack.core.webhooks.runOnce();
      await stack.clients.treasury.executeBatch(payout);
      await stack.clients.treasury.executeBatch(payout); // the replay answers from the stored batch
      await stack.clients.treasury.getPayout({ accessToken: partner.token, userId: recipient, payoutId: payout.items[0]!.payoutId });
      await stack.clients.treasury.getTreasury({ accessToken: partner.token });
      await stack.clients.budgets.createBudget({
        accessToken: parentGrant.accessToken,
        purpose: "trip",
        displayName: "Explained budget",
        chainAllowlist: ["base"],
        idempotencyKey: `explain-${randomBytes(4).toString("hex")}`,
      });
      await f.session(owner);
      await stack.clients.grants.getSession({ sessionToken: session });
      await stack.clients.grants.checkAuthorization({ ...consent.request, sessionToken: session });
      await stack.clients.grants.approveAuthorization({ request: consent.request, sessionToken: session, vaultId: owner.vaultId });
      await stack.clients.grants.listAgents({ sessionToken: session });
      await stack.clients.grants.getAgent({ sessionToken: session, agentId: f.agentOf(pending.agent.accessToken) });
      await stack.clients.grants.revokeUserGrant({ sessionToken: session, grantId: parentGrant.grantId });
      await stack.clients.budgets.approvePayment({ sessionToken: session, paymentId: pending.paymentId });
      await stack.clients.budgets.listPendingApprovals({ sessionToken: session });
      // A payment that would wait for the owner counts the vault's waiting items first.
      await stack.clients.budgets.initiatePayment({ accessToken: pending.agent.accessToken, payment: payment({ amountCents: 7_500n }) });
      // The dashboard's paged lists, first and next page.
      const page = await stack.clients.budgets.listPendingApprovals({ sessionToken: session, limit: 1 });
      await stack.clients.budgets.listPendingApprovals({ sessionToken: session, limit: 1, budgetsCursor: page.nextBudgetsCursor });
      await stack.clients.budgets.listPendingApprovals({ sessionToken: session, limit: 1, agentPrincipalId: toActivate.agentPrincipalId });
      await stack.clients.budgets.getMoneyView({ sessionToken: session });
      await stack.clients.budgets.activateBudget({ sessionToken: session, agentPrincipalId: toActivate.agentPrincipalId });
      await stack.clients.budgets.declineBudget({ sessionToken: session, agentPrincipalId: toDecline.agentPrincipalId });
      await stack.clients.budgets.fundBudget({
        sessionToken: session,
        vaultId: active.vaultId,
        amountCents: 1_000n,
        idempotencyKey: `explain-${randomBytes(4).toString("hex")}`,
      });
      await stack.clients.budgets.closeBudget({ sessionToken: session, vaultId: active.vaultId, keepFunds: true });
      await stack.clients.budgets.sweepBudget({ sessionToken: session, vaultId: active.vaultId });
      await stack.clients.grants.killSwitch({ sessionToken: session });
      await stack.core.reapProvisioning(); // the scheduled sweep of stuck budget creations
      const stranded = await stack.admin.budgets.listStrandedFunds({ limit: 1 });
      await stack.admin.budgets.listStrandedFunds({ limit: 1, cursor: stranded.nextCursor });
    });
    expect(
      receiver.received.some((r) => r.body.includes(hookedUser.userId)),
      "the webhook was delivered",
    ).to.equal(true);

    // Each hot path must be among the statements checked.
    const checked = await expectIndexedPlans(statements, [
      /from "user_wallets"|FROM user_wallets/i, // GET wallets
      /from "us_accounts"|FROM us_accounts/i, // GET US account
      /FROM ledger_entries/i, // the transfers feed
      /FROM partner_events[\s\S]*WHERE partner_id = \?/, // the events feed
      /INSERT INTO partner_events/, // an event enqueued with its change
      /INSERT INTO webhook_lanes/, // the dispatcher's due-lanes query
      /FROM partner_events[\s\S]*FOR UPDATE/, // the dispatcher leases the next event
      /SET delivery_state = 'delivered'/, // and records the delivery
      /treasury_batches/, // a payout batch and its replay
      /treasury_executions/, // a payout's lookup
      /web_sessions/, // the owner's session
      /from "budgets"|FROM budgets/i, // the owner's budgets
      /vault_provisioning_claims/, // an agent's budget creation
      /authorization_codes/, // the consent page's approval
      /cleanup_pending/, // the reaper's sweep
      /status = 'draft'\s+AND NOT EXISTS/, // the waiting items a pending payment counts
      /\(created_at, id\) >/, // the next page of pending approvals
      /status IN \('draft', 'active', 'declined', 'closed'\)/, // a sweep's budgets
      /closed_at::text AS closed_key/, // the operator's stranded funds, a page at a time
    ]);
    expect(checked.length).to.be.greaterThan(40);
  }

  it("the pruner's batches find expired rows by index", async () => {
    // Seeded here too: run alone, or after other suites' deletes were analyzed, small tables plan as scans.
    const { child } = await fundedChild(stack, { perDay: 1_000_000n, lifetime: 10_000_000n });
    await seed((await fixtures(stack).partner()).partnerId, child);
    await seedTokens();
    const statements = await capture(() => stack.core.prune());
    const offenders: string[] = [];
    for (const s of statements) {
      const scans = seqScans(await explain(stack.core.db, s.sql, s.bindings));
      if (scans.length > 0) offenders.push(`${scans.join(", ")} in: ${s.sql.replace(/\s+/g, " ").slice(0, 200)}`);
    }
    expect(statements.length).to.be.at.least(7);
    expect(statements.map((s) => s.sql).join("\n")).to.include("DELETE FROM rate_limit_windows");
    expect(offenders, offenders.join("\n")).to.deep.equal([]);
  });
});
