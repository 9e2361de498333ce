import { expect } from "chai";
import { requirePostgres } from "../../support/db.js";
import { parseRawAnswer, rawExchange } from "../../support/raw-http.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { partnerWithPayee } from "../../support/treasury.js";

/**
 * A read takes no body, so its only framing refusal is a body in a content coding (415): from a
 * caller whose bearer proves a partner it is audited under the read's action, as the writes'
 * framing refusals are; a request proving no partner is answered the same and leaves no row.
 */
describe("partner reads: a compressed body is refused 415 and audited for a proved partner (raw HTTP)", () => {
  let stack: TestStack;
  let token: string;
  let clientId: string;
  let userId: string;

  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    const payee = await partnerWithPayee(stack, { scopes: ["kyc:read"] });
    ({ token, userId } = payee);
    clientId = payee.partner.clientId;
  });
  after(() => stack.close());

  const reads = [
    { path: () => `/users/${userId}/kyc`, action: "partner.kyc.read" },
    { path: () => `/users/${userId}/wallets`, action: "partner.wallets.read" },
    { path: () => `/users/${userId}/us-account`, action: "partner.us_account.read" },
    { path: () => `/users/${userId}/transfers`, action: "partner.transfers.read" },
    { path: () => "/events", action: "partner.events.read" },
    { path: () => "/treasury", action: "partner.treasury.read" },
    { path: () => `/users/${userId}/payouts/p-1`, action: "partner.payouts.read" },
  ];

  /** A GET carrying a gzip-labelled body, sent as bytes (fetch sends no body on a GET). */
  async function compressedRead(path: string, authorization?: string) {
    const head = [`GET /api/partner${path} HTTP/1.1`, "Host: 127.0.0.1", "Connection: close", "Content-Encoding: gzip", "Content-Length: 2"];
    if (authorization) head.push(`Authorization: ${authorization}`);
    const res = parseRawAnswer(await rawExchange(stack.url, `${head.join("\r\n")}\r\n\r\n{}`));
    expect(res.status, JSON.stringify(res.body)).to.equal(415);
    expect((res.body.error as { code: string }).code).to.equal("unsupported_media_type");
    const rows = await stack.core.db("audit_records").where({ request_id: res.headers["x-request-id"] });
    return rows.map((r) => [r.actor, r.action, r.outcome, r.reason]);
  }

  for (const read of reads) {
    it(`GET ${read.action} with a compressed body: 415, one failure row under the partner; none without a proved partner`, async () => {
      expect(await compressedRead(read.path(), `Bearer ${token}`)).to.deep.equal([[`partner:${clientId}`, read.action, "failure", "unsupported_media_type"]]);
      expect(await compressedRead(read.path())).to.deep.equal([]);
      expect(await compressedRead(read.path(), "Bearer not.a.token")).to.deep.equal([]);
    });
  }

  it("concurrent compressed reads from valid and forged callers: exactly the valid ones are audited (PostgreSQL)", async function () {
    requirePostgres(this, "concurrent audit inserts need a real server");
    const calls = Array.from({ length: 21 }, (_, i) => {
      const read = reads[i % reads.length]!;
      const valid = i % 3 === 0;
      return compressedRead(read.path(), valid ? `Bearer ${token}` : `Bearer forged.${i}.token`).then((rows) => ({ rows, valid, read }));
    });
    for (const { rows, valid, read } of await Promise.all(calls)) {
      expect(rows).to.deep.equal(valid ? [[`partner:${clientId}`, read.action, "failure", "unsupported_media_type"]] : []);
    }
  });
});
