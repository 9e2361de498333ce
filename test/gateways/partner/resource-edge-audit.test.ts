import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { requirePostgres } from "../../support/db.js";
import { api, auditRowsOf, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { partnerWithPayee } from "../../support/treasury.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";

/**
 * A body refused before it is read (invalid JSON, too large, compressed) on a consent-gated
 * resource is audited under the partner its token proves, as on the treasury batch; a request
 * proving no partner leaves no row and is answered exactly as before.
 */
describe("partner resources: framing refusals of a valid caller are audited (HTTP)", () => {
  let stack: TestStack;
  let auditDown = false;
  let token: string;
  let clientId: string;
  let userId: string;

  before(async () => {
    stack = await startStack({
      gateway: true,
      webhookPollMs: 0,
      auditFaults: { appendFault: () => (auditDown ? new Error("injected audit store fault") : undefined) },
    });
    const payee = await partnerWithPayee(stack, { scopes: ["kyc:read"] });
    ({ token, userId } = payee);
    clientId = payee.partner.clientId;
  });
  after(() => stack.close());
  afterEach(() => {
    auditDown = false;
  });

  const rowsOf = (res: ApiResponse) => auditRowsOf(stack, res);

  const routes = [
    { path: () => "/users", action: "partner.users.create" },
    { path: () => `/users/${userId}/kyc/link`, action: "partner.kyc.link" },
  ];
  const framings: { label: string; send: { rawBody: string; headers?: Record<string, string> }; status: number; code: string }[] = [
    { label: "invalid JSON", send: { rawBody: "{bad" }, status: 400, code: "invalid_json" },
    { label: "a body over the limit", send: { rawBody: JSON.stringify({ email: `${"a".repeat(5000)}@example.com` }) }, status: 413, code: "body_too_large" },
    { label: "a gzip-encoded body", send: { rawBody: "{}", headers: { "content-encoding": "gzip" } }, status: 415, code: "unsupported_media_type" },
  ];

  for (const route of routes) {
    for (const f of framings) {
      const send = (t?: string, extra: Record<string, string> = {}) =>
        api(stack, "POST", route.path(), { token: t, rawBody: f.send.rawBody, headers: { "content-type": "application/json", ...f.send.headers, ...extra } });

      it(`POST ${route.action} with ${f.label} from a valid partner: ${f.status} ${f.code} as before, and one failure audit row`, async () => {
        const res = await send(token);
        expectHttpError(res, f.status, f.code);
        expect(await rowsOf(res)).to.deep.equal([[`partner:${clientId}`, route.action, "failure", f.code, ""]]);
      });

      it(`POST ${route.action} with ${f.label} from a valid partner: 503 audit_unavailable when the refusal cannot be audited`, async () => {
        auditDown = true;
        const res = await send(token);
        expectHttpError(res, 503, "audit_unavailable");
        expect(await rowsOf(res)).to.deep.equal([]);
      });

      for (const [who, t, extra] of [
        ["no bearer", undefined, {}],
        ["another scheme", undefined, { authorization: "Basic abc" }],
        ["a forged bearer", "not.a.token", {}],
      ] as const) {
        it(`POST ${route.action} with ${f.label} and ${who}: answered ${f.status} ${f.code} as before, no audit row, even with audit down`, async () => {
          const res = await send(t, extra);
          expectHttpError(res, f.status, f.code);
          expect(await rowsOf(res)).to.deep.equal([]);
          auditDown = true;
          expectHttpError(await send(t, extra), f.status, f.code);
        });
      }
    }

    it(`POST ${route.action} labelled text/plain from a valid partner: 400 invalid_request and one failure audit row`, async () => {
      const res = await api(stack, "POST", route.path(), { token, rawBody: "{}", headers: { "content-type": "text/plain" } });
      expectHttpError(res, 400, "invalid_request");
      expect(await rowsOf(res)).to.deep.equal([[`partner:${clientId}`, route.action, "failure", "invalid_request", ""]]);
    });

    for (const [who, t] of [
      ["no bearer", undefined],
      ["a forged bearer", "not.a.token"],
    ] as const) {
      it(`POST ${route.action} with a well-formed body and ${who}: 401 invalid_token and no audit row`, async () => {
        const res = await api(stack, "POST", route.path(), { token: t, json: {} });
        expectHttpError(res, 401, "invalid_token");
        expect(await rowsOf(res)).to.deep.equal([]);
      });
    }
  }

  it("a suspended partner's invalid JSON: 400 invalid_json as before (nothing new leaks), audited as partner_inactive", async () => {
    const partner = await createPartner(stack);
    const suspendedToken = await mintPartnerToken(stack, partner);
    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.SUSPENDED });
    const res = await api(stack, "POST", "/users", { token: suspendedToken, rawBody: "{bad", headers: { "content-type": "application/json" } });
    expectHttpError(res, 400, "invalid_json");
    expect(await rowsOf(res)).to.deep.equal([[`partner:${partner.clientId}`, "partner.users.create", "failure", "partner_inactive", ""]]);
  });

  it("concurrent framing refusals from valid and forged callers: exactly the valid ones are audited (PostgreSQL)", async function () {
    requirePostgres(this, "concurrent audit inserts need a real server");
    const sent = Array.from({ length: 24 }, (_, i) => {
      const route = routes[i % 2]!;
      const valid = i % 3 === 0;
      const rawBody = i % 4 < 2 ? "{bad" : JSON.stringify({ email: `${"b".repeat(5000)}@example.com` });
      return { valid, route, res: api(stack, "POST", route.path(), { token: valid ? token : `forged.${i}.token`, rawBody }) };
    });
    for (const s of sent) {
      const res = await s.res;
      expect(res.status, res.text).to.be.oneOf([400, 413]);
      const rows = await rowsOf(res);
      expect(rows, res.text).to.have.length(s.valid ? 1 : 0);
      if (s.valid) expect(rows[0]!.slice(0, 3)).to.deep.equal([`partner:${clientId}`, s.route.action, "failure"]);
    }
  });
});
