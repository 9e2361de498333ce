import { requirePostgres } from "../../support/db.js";
import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, auditRowsOf, createUserFor, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { bindTreasury } from "../../support/treasury.js";

/**
 * Every rejected batch request of a partner is audited, edge rejections included; one proving no
 * partner is nobody's action and leaves none, so a flood of them cannot grow the trail.
 */
describe("treasury rejections at the edge are audited (HTTP)", () => {
  let stack: TestStack;
  let auditDown = false;
  let token: string;
  let clientId: string;
  let payer: string;
  let user: string;

  before(async () => {
    stack = await startStack({ gateway: true, auditFaults: { appendFault: () => (auditDown ? new Error("injected audit store fault") : undefined) } });
    const partner = await createPartner(stack, { entitlements: ["treasury:write", "payouts:receive"] });
    clientId = partner.clientId;
    payer = await bindTreasury(stack.admin, partner, { balanceCents: 100_000n });
    user = (await createUserFor(stack, partner, ["payouts:receive"])).userId;
    token = await mintPartnerToken(stack, partner);
  });
  after(() => stack.close());
  afterEach(() => {
    auditDown = false;
  });

  const body = () => ({
    payer_entity_id: payer,
    items: [
      { execution_id: `ex-${randomUUID()}`, payout_id: `po-${randomUUID()}`, recipient: { user_id: user }, amount_cents: 100, currency: "USD", reference: "r" },
    ],
  });
  const post = (options: { token?: string; json?: unknown; rawBody?: string; headers?: Record<string, string> }) =>
    api(stack, "POST", "/treasury/payouts", { ...options, headers: { "content-type": "application/json", ...options.headers } });
  const rowsOf = (res: ApiResponse) => auditRowsOf(stack, res);

  const huge = () => ({ ...body(), items: Array.from({ length: 400 }, () => body().items[0]) });
  const cases: { label: string; send: () => Promise<ApiResponse>; status: number; code: string; actor: () => string | undefined; subject: string }[] = [
    {
      label: "413 body too large",
      send: () => post({ token, json: huge(), headers: { "idempotency-key": "k-413" } }),
      status: 413,
      code: "body_too_large",
      actor: () => `partner:${clientId}`,
      subject: "k-413",
    },
    {
      label: "413 body too large without a bearer",
      send: () => post({ json: huge() }),
      status: 413,
      code: "body_too_large",
      actor: () => undefined,
      subject: "",
    },
    {
      label: "invalid JSON",
      send: () => post({ token, rawBody: "{", headers: { "idempotency-key": "k-json" } }),
      status: 400,
      code: "invalid_json",
      actor: () => `partner:${clientId}`,
      subject: "k-json",
    },
    {
      label: "no bearer",
      send: () => post({ json: body(), headers: { "idempotency-key": "k-nobearer" } }),
      status: 401,
      code: "invalid_token",
      actor: () => undefined,
      subject: "k-nobearer",
    },
    {
      label: "a malformed Authorization header",
      send: () => post({ json: body(), headers: { authorization: "Basic abc", "idempotency-key": "k-basic" } }),
      status: 401,
      code: "invalid_token",
      actor: () => undefined,
      subject: "k-basic",
    },
    {
      label: "an invalid bearer",
      send: () => post({ token: "not.a.token", json: body(), headers: { "idempotency-key": "k-forged" } }),
      status: 401,
      code: "invalid_token",
      actor: () => undefined,
      subject: "k-forged",
    },
    {
      label: "no Idempotency-Key",
      send: () => post({ token, json: body() }),
      status: 400,
      code: "invalid_request",
      actor: () => `partner:${clientId}`,
      subject: "",
    },
    {
      label: "an unknown query parameter",
      send: () => api(stack, "POST", "/treasury/payouts?x=1", { token, json: body(), headers: { "idempotency-key": "k-query" } }),
      status: 400,
      code: "invalid_request",
      actor: () => `partner:${clientId}`,
      subject: "k-query",
    },
  ];

  for (const [label, headers] of [
    ["no bearer", {}],
    ["a malformed Authorization header", { authorization: "Basic abc" }],
    ["an invalid bearer", { authorization: "Bearer not.a.token" }],
  ] as const) {
    it(`GET /treasury with ${label}: answers 401 invalid_token and leaves no audit row, whether or not audit works`, async () => {
      const res = await api(stack, "GET", "/treasury", { headers: { ...headers } });
      expectHttpError(res, 401, "invalid_token");
      expect(await rowsOf(res)).to.deep.equal([]);
      auditDown = true;
      expectHttpError(await api(stack, "GET", "/treasury", { headers: { ...headers } }), 401, "invalid_token");
    });
  }

  it("GET /treasury with a query it does not take: answers 400 invalid_request and leaves one failure row under the partner", async () => {
    const res = await api(stack, "GET", "/treasury?x=1", { token });
    expectHttpError(res, 400, "invalid_request");
    expect(await rowsOf(res)).to.deep.equal([[`partner:${clientId}`, "partner.treasury.read", "failure", "invalid_request", ""]]);
    auditDown = true;
    expectHttpError(await api(stack, "GET", "/treasury?x=1", { token }), 503, "audit_unavailable");
  });

  for (const c of cases) {
    // Known before the partner exists: the anonymous cases name no actor at all.
    const audited = c.actor() !== undefined;
    it(`${c.label}: answers ${c.status} ${c.code} and leaves ${audited ? "one failure audit row" : "no audit row"}`, async () => {
      const res = await c.send();
      expectHttpError(res, c.status, c.code);
      expect(await rowsOf(res)).to.deep.equal(audited ? [[c.actor(), "treasury.batch.execute", "failure", c.code, c.subject]] : []);
    });

    it(`${c.label}: ${audited ? "answers 503 audit_unavailable when the rejection cannot be audited" : "answers the same when audit is down"}`, async () => {
      auditDown = true;
      const res = await c.send();
      if (audited) expectHttpError(res, 503, "audit_unavailable");
      else expectHttpError(res, c.status, c.code);
      expect(await rowsOf(res)).to.deep.equal([]);
    });
  }

  it("a flood of edge rejections: each of the partner's audited once, none without a bearer (Postgres)", async function () {
    // Concurrency against one audit table is a Postgres concern; PGlite runs one connection.
    requirePostgres(this, "a concurrent flood needs several connections");
    const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? post({ json: body() }) : post({ token, rawBody: "{" }))));
    for (const [i, res] of answers.entries()) expect(await rowsOf(res)).to.have.length(i % 2 ? 0 : 1);
  });

  it("the edge audit does not pay: a valid batch afterwards still executes once", async () => {
    const res = await post({ token, json: body(), headers: { "idempotency-key": `k-${randomUUID()}` } });
    expect(res.status, res.text).to.equal(200);
  });
});
