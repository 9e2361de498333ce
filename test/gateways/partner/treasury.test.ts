import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { Webhook } from "standardwebhooks";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { loadOpenApi, type OpenApiChecker } from "../../support/openapi.js";
import { bindTreasury } from "../../support/treasury.js";
import { TreasuryStatus } from "../../../gen/vaultgate/treasury/v1/treasury_pb.js";

/** The treasury endpoints over real HTTP, in the resource envelope. */
describe("partner treasury endpoints (HTTP)", () => {
  let stack: TestStack;
  let openapi: OpenApiChecker;
  before(async () => {
    stack = await startStack({ gateway: true });
    openapi = await loadOpenApi(stack.url);
  });
  after(() => stack.close());

  async function call(method: string, path: string, options: Parameters<typeof api>[3] = {}): Promise<ApiResponse> {
    const res = await api(stack, method, path, options);
    openapi.check(method, path, res);
    expect(res.headers.get("x-request-id")).to.match(/^[0-9a-f-]{36}$/);
    return res;
  }

  async function setup(balanceCents = 100_000n) {
    const partner = await createPartner(stack, { entitlements: ["treasury:write", "payouts:receive"] });
    const payer = await bindTreasury(stack.admin, partner, { balanceCents });
    const { userId } = await createUserFor(stack, partner, ["payouts:receive"]);
    const token = await mintPartnerToken(stack, partner);
    return { partner, payer, user: userId, token };
  }

  const body = (payer: string, user: string, n = 1, amount = 100) => ({
    payer_entity_id: payer,
    items: Array.from({ length: n }, (_, i) => ({
      execution_id: `ex-${randomUUID()}`,
      payout_id: `po-${randomUUID()}`,
      recipient: { user_id: user },
      amount_cents: amount,
      currency: "USD",
      reference: `invoice ${i}`,
    })),
  });

  /** POST /treasury/payouts; `key` null sends no Idempotency-Key header. */
  const post = (token: string, json: unknown, key: string | null = `k-${randomUUID()}`) =>
    call("POST", "/treasury/payouts", { token, json, headers: key === null ? {} : { "idempotency-key": key } });

  it("GET /treasury shows status, payer, currency and available balance", async () => {
    const { payer, token } = await setup(4_200n);
    const res = await call("GET", "/treasury", { token });
    expect(res.status).to.equal(200);
    expect(res.body).to.deep.equal({ status: "active", payer_entity_id: payer, currency: "USD", available_cents: 4_200 });
  });

  it("pays a batch and replays it byte for byte under the same key", async () => {
    const { partner, payer, user, token } = await setup();
    const b = body(payer, user, 3);
    const key = `k-${randomUUID()}`;
    const first = await post(token, b, key);
    expect(first.status, first.text).to.equal(200);
    const parsed = first.body as { batch_id: string; total_cents: number; items: { status: string }[] };
    expect(parsed.total_cents).to.equal(300);
    expect(parsed.items.map((i) => i.status)).to.deep.equal(["executed", "executed", "executed"]);
    stack.clock.advance(10_000);
    // Same request, different JSON spelling: the canonical body is the same.
    const again = await call("POST", "/treasury/payouts", {
      token,
      rawBody: JSON.stringify(b, null, 2),
      headers: { "idempotency-key": key, "content-type": "application/json" },
    });
    expect(again.status).to.equal(200);
    expect(again.text).to.equal(first.text);
    expect(again.headers.get("idempotent-replayed")).to.equal("true");
    const reordered = await post(token, { ...b, items: [...b.items].reverse() }, key);
    expectHttpError(reordered, 409, "idempotency_conflict");
    const t = await call("GET", "/treasury", { token });
    expect((t.body as { available_cents: number }).available_cents).to.equal(100_000 - 300);

    const events = await call("GET", "/events", { token });
    const feed = (events.body as { data: { type: string; data: { batch_id: string; payouts: { payout_id: string }[] } }[] }).data;
    expect(feed.map((e) => [e.type, e.data.batch_id])).to.deep.equal([["payout.executed", parsed.batch_id]]);
    expect(feed[0]!.data.payouts.map((p) => p.payout_id)).to.deep.equal(b.items.map((i) => i.payout_id));
    // A payout receipt is treasury data: a token minted without treasury:write does not list it.
    const narrow = await mintPartnerToken(stack, partner, "payouts:receive");
    expect(((await call("GET", "/events", { token: narrow })).body as { data: unknown[] }).data).to.deep.equal([]);
    const receipt = await call("GET", `/users/${user}/payouts/${b.items[1]!.payout_id}`, { token });
    expect(receipt.status).to.equal(200);
    expect(receipt.body).to.deep.include({
      payout_id: b.items[1]!.payout_id,
      execution_id: b.items[1]!.execution_id,
      batch_id: parsed.batch_id,
      user_id: user,
      amount_cents: 100,
      currency: "USD",
      reference: "invoice 1",
      status: "executed",
    });
  });

  it("requires the Idempotency-Key header, at most 255 characters", async () => {
    const { payer, user, token } = await setup();
    expectHttpError(await post(token, body(payer, user), null), 400, "invalid_request");
    expectHttpError(await post(token, body(payer, user), "k".repeat(256)), 400, "invalid_request");
    expect((await post(token, body(payer, user), "k".repeat(255))).status).to.equal(200);
    // A repeated header is not one key.
    const repeated = await fetch(`${stack.url}/api/partner/treasury/payouts`, {
      method: "POST",
      headers: [
        ["authorization", `Bearer ${token}`],
        ["content-type", "application/json"],
        ["idempotency-key", "k-a"],
        ["idempotency-key", "k-b"],
      ],
      body: JSON.stringify(body(payer, user)),
    });
    expect(repeated.status).to.equal(400);
  });

  it("refuses unknown fields, bad JSON and bodies over 64 KiB", async () => {
    const { payer, user, token } = await setup();
    const b = body(payer, user) as Record<string, unknown>;
    const unknown = await post(token, { ...b, memo: "x" });
    expectHttpError(unknown, 400, "invalid_request");
    // Validation rejections are audited too, under this response's request id.
    const audit = await stack.admin.audit.listRecords({ requestId: unknown.headers.get("x-request-id")! });
    expect(audit.records.map((r) => [r.action, r.reason])).to.deep.equal([["treasury.batch.execute", "invalid_request"]]);
    const item = { ...(b.items as Record<string, unknown>[])[0]!, payer: payer };
    expectHttpError(await post(token, { ...b, items: [item] }), 400, "invalid_request");
    // Three capitals that name no ISO 4217 currency.
    const madeUp = await post(token, { ...b, items: [{ ...(b.items as Record<string, unknown>[])[0]!, currency: "XYZ" }] });
    expectHttpError(madeUp, 400, "invalid_request");
    expect((madeUp.body as { error: { message: string } }).error.message).to.equal("items[0].currency must be an ISO 4217 code in upper case");
    expectHttpError(
      await call("POST", "/treasury/payouts", { token, rawBody: "{", headers: { "idempotency-key": "k-1", "content-type": "application/json" } }),
      400,
      "invalid_json",
    );
    const big = body(payer, user, 420);
    expect(JSON.stringify(big).length).to.be.greaterThan(64 * 1024);
    expectHttpError(await post(token, big), 413, "body_too_large");
  });

  it("renders each treasury refusal", async () => {
    const { partner, payer, user, token } = await setup(1_000n);
    expectHttpError(await post(token, body(randomUUID(), user)), 403, "payer_not_allowed");
    expectHttpError(await post(token, body(payer, user, 1, 5_000)), 409, "insufficient_funds");
    expectHttpError(await post(token, body(payer, randomUUID())), 403, "grant_required");
    await stack.admin.treasury.bindTreasury({ clientId: partner.clientId, payerEntityId: payer, balanceCents: 1_000n, capPerItemCents: 50n });
    const denied = await post(token, body(payer, user));
    expectHttpError(denied, 403, "policy_denied");
    expect((denied.body as { error: { message: string } }).error.message)
      .to.contain("per_item_cap")
      .and.not.match(/\d/);
    await stack.admin.treasury.setTreasuryStatus({ clientId: partner.clientId, status: TreasuryStatus.MANDATE_EXPIRED });
    const expired = await post(token, body(payer, user));
    expectHttpError(expired, 403, "treasury_inactive");
    expect((expired.body as { error: { message: string } }).error.message).to.equal("the treasury's mandate has expired");
    const first = body(payer, user);
    await stack.admin.treasury.setTreasuryStatus({ clientId: partner.clientId, status: TreasuryStatus.ACTIVE });
    await stack.admin.treasury.bindTreasury({ clientId: partner.clientId, payerEntityId: payer, balanceCents: 1_000n });
    expect((await post(token, first)).status).to.equal(200);
    const changed = { ...first, items: [{ ...first.items[0]!, amount_cents: 101 }] };
    expectHttpError(await post(token, changed), 409, "execution_conflict");
  });

  it("a partner without a treasury gets 404 treasury_not_configured", async () => {
    const partner = await createPartner(stack, { entitlements: ["treasury:write"] });
    const token = await mintPartnerToken(stack, partner);
    expectHttpError(await call("GET", "/treasury", { token }), 404, "treasury_not_configured");
    expectHttpError(await post(token, body(randomUUID(), randomUUID())), 404, "treasury_not_configured");
  });

  it("needs treasury:write in the token, and payouts:receive for receipts", async () => {
    const { partner, payer, user } = await setup();
    const narrow = await mintPartnerToken(stack, partner, "payouts:receive");
    expectHttpError(await call("GET", "/treasury", { token: narrow }), 403, "grant_required");
    expectHttpError(await post(narrow, body(payer, user)), 403, "grant_required");
    const treasuryOnly = await mintPartnerToken(stack, partner, "treasury:write");
    const b = body(payer, user);
    expect((await post(treasuryOnly, b)).status).to.equal(200);
    expectHttpError(await call("GET", `/users/${user}/payouts/${b.items[0]!.payout_id}`, { token: treasuryOnly }), 403, "grant_required");
    expectHttpError(await call("GET", "/treasury"), 401, "invalid_token");
  });

  it("a receipt is read back for ids of every allowed length, up to 128 characters", async () => {
    const { payer, user, token } = await setup();
    const b = body(payer, user, 2);
    b.items[0]!.payout_id = "L".repeat(128);
    b.items[1]!.payout_id = `A-z0.9_:~${"p".repeat(119)}`;
    expect((await post(token, b)).status).to.equal(200);
    for (const item of b.items) {
      const receipt = await call("GET", `/users/${user}/payouts/${encodeURIComponent(item.payout_id)}`, { token });
      expect(receipt.status).to.equal(200);
      expect((receipt.body as { payout_id: string }).payout_id).to.equal(item.payout_id);
    }
    expectHttpError(await call("GET", `/users/${user}/payouts/${"L".repeat(129)}`, { token }), 400, "invalid_request");
  });

  it("an amount JSON would round is refused whole, and nothing is paid", async () => {
    const { payer, user, token } = await setup(10_000n);
    for (const amount of ["4.9999999999999999", "9007199254740993"]) {
      const rawBody = JSON.stringify(body(payer, user, 1, 0)).replace('"amount_cents":0', `"amount_cents":${amount}`);
      const res = await call("POST", "/treasury/payouts", {
        token,
        rawBody,
        headers: { "idempotency-key": `k-${randomUUID()}`, "content-type": "application/json" },
      });
      expectHttpError(res, 400, "invalid_request");
    }
    expect(((await call("GET", "/treasury", { token })).body as { available_cents: number }).available_cents).to.equal(10_000);
  });

  it("a receipt for an unknown payout is 404", async () => {
    const { user, token } = await setup();
    expectHttpError(await call("GET", `/users/${user}/payouts/po-none`, { token }), 404, "not_found");
    expectHttpError(await call("GET", `/users/not-a-uuid/payouts/po-none`, { token }), 400, "invalid_request");
  });
});

describe("payout.executed webhook", () => {
  it("is delivered signed (verified by the standardwebhooks package) once per batch", async () => {
    const stack = await startStack({ webhookPollMs: 0 });
    const receiver = await startWebhookReceiver();
    try {
      const partner = await createPartner(stack, { entitlements: ["treasury:write", "payouts:receive"], webhookUrl: receiver.url });
      const { secret } = await stack.admin.partnerResources.setWebhook({ clientId: partner.clientId, url: receiver.url });
      const payer = await bindTreasury(stack.admin, partner);
      const { userId } = await createUserFor(stack, partner, ["payouts:receive"]);
      const token = (await stack.clients.partners.issueToken({ clientId: partner.clientId, clientSecret: partner.clientSecret })).accessToken;
      const res = await stack.clients.treasury.executeBatch({
        accessToken: token,
        idempotencyKey: `k-${randomUUID()}`,
        payerEntityId: payer,
        items: [{ executionId: "ex-1", payoutId: "po-1", recipientUserId: userId, amountCents: 250n, currency: "USD", reference: "r" }],
      });
      await stack.core.webhooks.runOnce();
      await receiver.waitFor(1);
      const payload = new Webhook(secret).verify(receiver.received[0]!.body, receiver.received[0]!.headers as Record<string, string>) as {
        type: string;
        data: { batch_id: string; payouts: { payout_id: string; user_id: string; amount_cents: number }[] };
      };
      expect(payload.type).to.equal("payout.executed");
      expect(payload.data.batch_id).to.equal(res.batch!.batchId);
      expect(payload.data.payouts).to.deep.equal([{ payout_id: "po-1", execution_id: "ex-1", user_id: userId, amount_cents: 250, reference: "r" }]);
    } finally {
      await stack.close();
      await receiver.close();
    }
  });
});
