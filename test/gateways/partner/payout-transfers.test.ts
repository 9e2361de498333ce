import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { payoutTransferId } from "../../../core/ledger/treasury.js";
import { insertTransferEntry } from "../../../core/ledger/transfers.js";
import { md5Uuid } from "../../../lib/crypto.js";
import { feedsSettled } from "../../support/db.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { loadOpenApi, type OpenApiChecker } from "../../support/openapi.js";
import { bindTreasury, grantConsent } from "../../support/treasury.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";

type Receiver = Awaited<ReturnType<typeof startWebhookReceiver>>;

interface Transfer {
  transfer_id: string;
  direction: string;
  amount_cents: number;
  currency: string;
  status: string;
  created_at: string;
  updated_at: string;
}

interface Delivered {
  type: string;
  data: Record<string, unknown>;
}

/**
 * A payout shows in the recipient's transfers, and as transfer.settled webhooks, for every
 * partner the recipient lets read transfers; other partners see and hear nothing of it.
 */
describe("payouts in the recipients' transfers (HTTP)", () => {
  let stack: TestStack;
  let openapi: OpenApiChecker;
  const receivers: Receiver[] = [];
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    openapi = await loadOpenApi(stack.url);
  });
  after(async () => {
    await stack.close();
    for (const r of receivers) await r.close();
  });

  async function call(method: string, path: string, options: Parameters<typeof api>[3] = {}): Promise<ApiResponse> {
    const res = await api(stack, method, path, options);
    openapi.check(method, path, res);
    return res;
  }

  /** A partner with its own webhook receiver and signing secret. */
  async function partnerWithWebhook(entitlements: string[]) {
    const receiver = await startWebhookReceiver();
    receivers.push(receiver);
    const partner = await createPartner(stack, { entitlements, webhookUrl: receiver.url });
    const { secret } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
    return { partner, receiver, secret, token: await mintPartnerToken(stack, partner) };
  }

  /** Every delivery verified with the standardwebhooks package (a bad signature throws). */
  const verified = (receiver: Receiver, secret: string): Delivered[] =>
    receiver.received.map((r) => new Webhook(secret).verify(r.body, r.headers as Record<string, string>) as Delivered);

  const post = (token: string, json: unknown, key = `k-${randomUUID()}`) =>
    call("POST", "/treasury/payouts", { token, json, headers: { "idempotency-key": key } });

  const item = (userId: string, amount: number) => ({
    execution_id: `ex-${randomUUID()}`,
    payout_id: `po-${randomUUID()}`,
    recipient: { user_id: userId },
    amount_cents: amount,
    currency: "USD",
    reference: "May rebate",
  });

  async function transfersOf(token: string, userId: string): Promise<Transfer[]> {
    await feedsSettled(stack.core.db); // the feed holds back rows another database's open transaction could precede
    const res = await call("GET", `/users/${userId}/transfers?limit=100`, { token });
    expect(res.status, res.text).to.equal(200);
    return (res.body as { data: Transfer[] }).data;
  }

  async function eventTypes(token: string): Promise<string[]> {
    const res = await call("GET", "/events?limit=100", { token });
    expect(res.status, res.text).to.equal(200);
    return (res.body as { data: { type: string }[] }).data.map((e) => e.type);
  }

  it("credits the recipient: transfers and signed transfer.settled for partners with transfers:read, payout.executed for the payer, nothing for the others", async () => {
    const payer = await partnerWithWebhook(["treasury:write", "payouts:receive", "transfers:read"]);
    const reader = await partnerWithWebhook(["transfers:read"]);
    const outsider = await partnerWithWebhook(["kyc:read", "transfers:read"]);
    const payerEntity = await bindTreasury(stack.admin, payer.partner, { balanceCents: 10_000n });
    // The recipient lets the payer pay them, the reader read their transfers, the outsider only read their KYC.
    const { userId } = await createUserFor(stack, payer.partner, ["payouts:receive"]);
    await grantConsent(stack.admin, reader.partner, userId, ["transfers:read"]);
    await grantConsent(stack.admin, outsider.partner, userId, ["kyc:read"]);
    // A second recipient the reader knows nothing of.
    const { userId: stranger } = await createUserFor(stack, payer.partner, ["payouts:receive"]);

    const body = { payer_entity_id: payerEntity, items: [item(userId, 1_500), item(stranger, 300), item(userId, 700)] };
    const key = `k-${randomUUID()}`;
    const paid = await post(payer.token, body, key);
    expect(paid.status, paid.text).to.equal(200);
    const batchId = (paid.body as { batch_id: string }).batch_id;

    // The reader sees both credits in the recipient's transfers, settled, ids derived from the payer and the execution.
    const seen = await transfersOf(reader.token, userId);
    const ids = [body.items[0]!, body.items[2]!].map((i) => payoutTransferId(payer.partner.partnerId, i.execution_id));
    expect(seen.map((t) => [t.transfer_id, t.direction, t.amount_cents, t.currency, t.status])).to.deep.equal([
      [ids[0], "credit", 1_500, "USD", "settled"],
      [ids[1], "credit", 700, "USD", "settled"],
    ]);
    // The reader is not told of the stranger's payout; the outsider may not read transfers; the payer has no such consent.
    expectHttpError(await call("GET", `/users/${stranger}/transfers`, { token: reader.token }), 404, "user_not_found");
    expectHttpError(await call("GET", `/users/${userId}/transfers`, { token: outsider.token }), 403, "grant_required");
    expectHttpError(await call("GET", `/users/${userId}/transfers`, { token: payer.token }), 403, "grant_required");

    // The identical request again is a replay: nothing more is credited or announced.
    const again = await post(payer.token, body, key);
    expect(again.headers.get("idempotent-replayed")).to.equal("true");
    expect(await transfersOf(reader.token, userId)).to.deep.equal(seen);

    await stack.core.webhooks.runOnce();
    const toReader = verified(reader.receiver, reader.secret);
    expect(toReader.map((d) => d.type)).to.deep.equal(["transfer.settled", "transfer.settled"]);
    expect(toReader.map((d) => d.data)).to.deep.equal(seen.map((t) => ({ user_id: userId, ...t })));
    const toPayer = verified(payer.receiver, payer.secret);
    expect(toPayer.map((d) => d.type)).to.deep.equal(["payout.executed"]);
    expect(toPayer[0]!.data).to.deep.include({ batch_id: batchId, total_cents: 2_500 });
    expect(outsider.receiver.received).to.deep.equal([]);
    expect(await eventTypes(outsider.token)).to.deep.equal([]);
    expect(await eventTypes(reader.token)).to.deep.equal(["transfer.settled", "transfer.settled"]);

    // Same event shape as a transfer recorded by the operator (`vaultgate ledger record`).
    await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 5n });
    await stack.core.webhooks.runOnce();
    const recorded = verified(reader.receiver, reader.secret).at(-1)!;
    expect(recorded.type).to.equal("transfer.settled");
    expect(Object.keys(recorded.data).sort()).to.deep.equal(Object.keys(toReader[0]!.data).sort());
  });

  it("a payer the recipient lets read their transfers gets payout.executed first, then transfer.settled per payout in batch order", async () => {
    const payer = await partnerWithWebhook(["treasury:write", "payouts:receive", "transfers:read"]);
    const payerEntity = await bindTreasury(stack.admin, payer.partner, { balanceCents: 10_000n });
    const users = [
      await createUserFor(stack, payer.partner, ["payouts:receive", "transfers:read"]),
      await createUserFor(stack, payer.partner, ["payouts:receive", "transfers:read"]),
    ];
    const body = { payer_entity_id: payerEntity, items: [item(users[1]!.userId, 40), item(users[0]!.userId, 60), item(users[1]!.userId, 20)] };
    expect((await post(payer.token, body)).status).to.equal(200);
    await stack.core.webhooks.runOnce();
    const got = verified(payer.receiver, payer.secret);
    expect(got.map((d) => d.type)).to.deep.equal(["payout.executed", "transfer.settled", "transfer.settled", "transfer.settled"]);
    expect(got.slice(1).map((d) => [d.data.user_id, d.data.amount_cents, d.data.transfer_id])).to.deep.equal(
      body.items.map((i) => [i.recipient.user_id, i.amount_cents, payoutTransferId(payer.partner.partnerId, i.execution_id)]),
    );
    const seen = await transfersOf(payer.token, users[1]!.userId);
    expect(seen.map((t) => t.amount_cents)).to.deep.equal([40, 20]);
  });

  it("a consent to transfers:read revoked before the payout means no event and no access, granted later shows the payout", async () => {
    const payer = await partnerWithWebhook(["treasury:write", "payouts:receive"]);
    const reader = await partnerWithWebhook(["transfers:read"]);
    const payerEntity = await bindTreasury(stack.admin, payer.partner, { balanceCents: 1_000n });
    const { userId } = await createUserFor(stack, payer.partner, ["payouts:receive"]);
    await grantConsent(stack.admin, reader.partner, userId, ["transfers:read"]);
    await stack.admin.partnerResources.revokeConsent({ clientId: reader.partner.clientId, userId, scopes: { scopes: ["transfers:read"] } });
    const body = { payer_entity_id: payerEntity, items: [item(userId, 250)] };
    expect((await post(payer.token, body)).status).to.equal(200);
    await stack.core.webhooks.runOnce();
    expect(reader.receiver.received).to.deep.equal([]);
    expectHttpError(await call("GET", `/users/${userId}/transfers`, { token: reader.token }), 403, "grant_required");
    // The transfer is the user's: a partner they let read it later sees it (events are not sent after the fact).
    await grantConsent(stack.admin, reader.partner, userId, ["transfers:read"]);
    const seen = await transfersOf(reader.token, userId);
    expect(seen.map((t) => [t.transfer_id, t.amount_cents])).to.deep.equal([[payoutTransferId(payer.partner.partnerId, body.items[0]!.execution_id), 250]]);
    await stack.core.webhooks.runOnce();
    expect(reader.receiver.received).to.deep.equal([]);
  });
  /** Every page of a user's transfers, `limit` at a time, following next_cursor; and the watermark after the last. */
  async function pagedTransfers(token: string, userId: string, limit: number) {
    const seen: Transfer[] = [];
    let cursor = "";
    await feedsSettled(stack.core.db);
    for (let pages = 0; pages < 50; pages++) {
      const res = await call("GET", `/users/${userId}/transfers?limit=${limit}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`, { token });
      expect(res.status, res.text).to.equal(200);
      const body = res.body as { data: Transfer[]; next_cursor: string | null; watermark: string };
      seen.push(...body.data);
      if (!body.next_cursor) return { seen, watermark: body.watermark };
      cursor = body.next_cursor;
    }
    throw new Error("too many pages");
  }

  it("pages through recorded transfers and payouts in the order they were written, one cursor across both, and a watermark sees what comes after", async () => {
    const payer = await partnerWithWebhook(["treasury:write"]);
    const reader = await partnerWithWebhook(["transfers:read"]);
    const payerEntity = await bindTreasury(stack.admin, payer.partner, { balanceCents: 10_000n });
    const { userId } = await createUserFor(stack, payer.partner, ["payouts:receive"]);
    await grantConsent(stack.admin, reader.partner, userId, ["transfers:read"]);
    const record = async (direction: string, cents: number, status = "settled") =>
      (await stack.admin.partnerResources.recordLedgerEntry({ userId, direction, amountCents: BigInt(cents), status })).transfer!.transferId;
    const pay = async (...cents: number[]) => {
      const body = { payer_entity_id: payerEntity, items: cents.map((c) => item(userId, c)) };
      expect((await post(payer.token, body)).status).to.equal(200);
      return body.items.map((i) => payoutTransferId(payer.partner.partnerId, i.execution_id));
    };

    const written = [
      await record("credit", 11),
      ...(await pay(21, 22, 23)),
      await record("debit", 5),
      await record("credit", 7, "pending"),
      ...(await pay(31)),
    ];
    for (const limit of [1, 2, 3, 100]) {
      const { seen } = await pagedTransfers(reader.token, userId, limit);
      expect(
        seen.map((t) => t.transfer_id),
        `limit ${limit}`,
      ).to.deep.equal(written);
      expect(seen.map((t) => [t.direction, t.amount_cents, t.status])).to.deep.equal([
        ["credit", 11, "settled"],
        ["credit", 21, "settled"],
        ["credit", 22, "settled"],
        ["credit", 23, "settled"],
        ["debit", 5, "settled"],
        ["credit", 7, "pending"],
        ["credit", 31, "settled"],
      ]);
    }
    const { watermark } = await pagedTransfers(reader.token, userId, 100);
    const later = [...(await pay(41)), await record("credit", 51)];
    const since = await call("GET", `/users/${userId}/transfers?since=${encodeURIComponent(watermark)}`, { token: reader.token });
    expect((since.body as { data: Transfer[] }).data.map((t) => t.transfer_id)).to.deep.equal(later);
    const report = await stack.admin.audit.verifyLedger({});
    expect(report.discrepancies.map((d) => d.message)).to.deep.equal([]);
  });

  it("a payout stored without a feed position (before this version, or by a replica of the version before during a rollout) counts once: as its transfer entry if it has one, else not at all", async () => {
    const payer = await partnerWithWebhook(["treasury:write"]);
    const reader = await partnerWithWebhook(["transfers:read"]);
    await bindTreasury(stack.admin, payer.partner, { balanceCents: 10_000n });
    const { userId } = await createUserFor(stack, payer.partner, ["payouts:receive"]);
    await grantConsent(stack.admin, reader.partner, userId, ["transfers:read"]);
    const at = new Date();
    // What the version before wrote for a payout: the execution (no seq, no xid) and, since
    // payouts credit their recipients, a settled transfer entry with the payout's transfer id
    // and its posting. Before that, an execution alone.
    const legacy = async (executionId: string) =>
      stack.core.db.raw(
        `INSERT INTO treasury_executions (partner_id, execution_id, payout_id, batch_id, recipient_user_id, payer_entity_id, amount_cents, currency, reference, executed_at)
         VALUES (?, ?, ?, ?, ?, ?, 600, 'USD', 'old', ?)`,
        [payer.partner.partnerId, executionId, `po-${randomUUID()}`, randomUUID(), userId, randomUUID(), at],
      );
    const credited = `ex-${randomUUID()}`;
    await legacy(credited);
    await legacy(`ex-${randomUUID()}`);
    const id = payoutTransferId(payer.partner.partnerId, credited);
    await stack.core.db.transaction((trx) =>
      insertTransferEntry(trx, {
        id,
        userId,
        direction: "credit",
        amountCents: 600,
        currency: "USD",
        status: "settled",
        createdAt: at,
        updatedAt: at,
      }),
    );

    expect((await transfersOf(reader.token, userId)).map((t) => [t.transfer_id, t.amount_cents])).to.deep.equal([[id, 600]]);
    const report = await stack.admin.audit.verifyLedger({});
    expect(report.discrepancies.map((d) => d.message)).to.deep.equal([]);
  });

  it("a payout's transfer_id is an RFC 9562 UUID (version and variant bits), in the transfers list and in transfer.settled alike", async () => {
    const payer = await partnerWithWebhook(["treasury:write", "transfers:read"]);
    const payerEntity = await bindTreasury(stack.admin, payer.partner, { balanceCents: 10_000n });
    const { userId } = await createUserFor(stack, payer.partner, ["payouts:receive", "transfers:read"]);
    // Sixteen payouts: an id with arbitrary version and variant bits would fail this almost surely.
    const paid = await post(payer.token, { payer_entity_id: payerEntity, items: Array.from({ length: 16 }, () => item(userId, 10)) });
    expect(paid.status, paid.text).to.equal(200);

    const listed = (await transfersOf(payer.token, userId)).map((t) => t.transfer_id);
    const events = await call("GET", "/events?limit=100", { token: payer.token });
    const settled = (events.body as { data: Delivered[] }).data.filter((e) => e.type === "transfer.settled").map((e) => e.data.transfer_id);
    expect(listed).to.have.length(16);
    expect(settled).to.deep.equal(listed);
    for (const id of listed) expect(id).to.match(/^[0-9a-f]{8}-[0-9a-f]{4}-[1-8][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);

    // A payout the version before stored had no transfer_id column: it keeps the id it was listed with.
    const [first] = (paid.body as { items: { execution_id: string }[] }).items;
    await stack.core.db.raw(`UPDATE treasury_executions SET transfer_id = NULL WHERE partner_id = ? AND execution_id = ?`, [
      payer.partner.partnerId,
      first!.execution_id,
    ]);
    const legacy = md5Uuid(`payout:${payer.partner.partnerId}:${first!.execution_id}`);
    expect((await transfersOf(payer.token, userId)).map((t) => t.transfer_id)).to.deep.equal([legacy, ...listed.slice(1)]);
  });
});
