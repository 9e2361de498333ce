import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { api, auditRowsOf, type ApiResponse } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { partnerWithPayee } from "../../support/treasury.js";
import { atOnceOnPostgres } from "../../support/db.js";

const MESSAGE = "the path is not valid percent-encoded UTF-8";

/**
 * A path segment that is not percent-encoded UTF-8 is a request-shape problem like a long or
 * non-UUID id: the caller's checks come first (no or a forged bearer: 401, no row), then the
 * route refuses it 400 invalid_request, audited under its action for the partner proved.
 */
describe("partner API: a malformed percent-encoding in the path is refused after the caller's checks, audited", () => {
  let stack: TestStack;
  let token: string;
  let clientId: string;

  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    const payee = await partnerWithPayee(stack, { scopes: ["kyc:read", "transfers:read", "payouts:receive"] });
    token = payee.token;
    clientId = payee.partner.clientId;
  });
  after(() => stack.close());

  const auditRows = async () => Number((await stack.core.db("audit_records").count({ n: "*" }))[0]!.n);
  const message = (res: ApiResponse) => (res.body as { error: { message: string } }).error.message;

  /** [method, path, audited action, body]. */
  const cases: [string, string, string, unknown][] = [
    ["GET", "/users/%E0%A4%A/kyc", "partner.kyc.read", undefined],
    ["GET", "/users/%ZZ/wallets", "partner.wallets.read", undefined],
    ["GET", "/users/%FF/us-account", "partner.us_account.read", undefined],
    ["GET", "/users/%E0%A4%A/transfers?limit=5", "partner.transfers.read", undefined],
    ["GET", "/users/%E0%A4%A/payouts/po-1", "partner.payouts.read", undefined],
    ["GET", "/users/00000000-0000-4000-8000-000000000000/payouts/%C3", "partner.payouts.read", undefined],
    ["POST", "/users/%E0%A4%A/kyc/link", "partner.kyc.link", {}],
  ];

  for (const [method, path, action, json] of cases) {
    it(`${method} ${path} from a valid partner: 400 invalid_request, audited as a ${action} failure`, async () => {
      const res = await api(stack, method, path, { token, json });
      expectHttpError(res, 400, "invalid_request");
      expect(message(res)).to.equal(MESSAGE);
      expect(await auditRowsOf(stack, res)).to.deep.equal([[`partner:${clientId}`, action, "failure", "invalid_request", ""]]);
    });
  }

  it("without a bearer, or with another scheme or a forged one: 401 invalid_token and no audit row", async () => {
    const before = await auditRows();
    for (const [method, path, , json] of cases) {
      const none = await api(stack, method, path, { json });
      expectHttpError(none, 401, "invalid_token");
      expect(none.headers.get("www-authenticate")).to.equal("Bearer");
      expectHttpError(await api(stack, method, path, { json, headers: { authorization: "Basic abc" } }), 401, "invalid_token");
      const forged = await api(stack, method, path, { token: "forged.token.value", json });
      expectHttpError(forged, 401, "invalid_token");
      expect(forged.headers.get("www-authenticate")).to.equal('Bearer error="invalid_token"');
    }
    expect(await auditRows()).to.equal(before);
  });

  it("a malformed segment of a path no route has is 404 not_found, whoever asks, and writes no row", async () => {
    const before = await auditRows();
    for (const t of [undefined, token]) {
      const res = await api(stack, "GET", "/us%ZZers/x", { token: t });
      expectHttpError(res, 404, "not_found");
    }
    expect(await auditRows()).to.equal(before);
  });

  it("a well-formed escape is still read as the character it encodes", async () => {
    const res = await api(stack, "GET", "/users/%75%75/kyc", { token });
    expectHttpError(res, 400, "invalid_request");
    expect(message(res)).to.equal("user id must be a UUID");
  });

  it("malformed paths from valid and forged callers (concurrently on PostgreSQL) audit exactly the valid ones", async () => {
    const before = await auditRows();
    const answers = await atOnceOnPostgres(
      Array.from({ length: 20 }, (_, i) => i),
      (i) => api(stack, "GET", cases[i % 5]![1], { token: i % 2 ? "forged.token.value" : token }),
    );
    answers.forEach((res, i) => {
      expectHttpError(res, i % 2 ? 401 : 400, i % 2 ? "invalid_token" : "invalid_request");
    });
    expect(await auditRows()).to.equal(before + 10);
  });
});
