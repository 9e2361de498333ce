import { expect } from "chai";
import { parseRawAnswer, rawExchange } from "../../support/raw-http.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { partnerWithPayee } from "../../support/treasury.js";

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * An HTTP/1.1 request without Host is a 400 (RFC 9112 3.2), answered like every other request the
 * gateway cannot take: a request id, the surface's envelope, no-store and the connection closed.
 */
describe("partner API: an HTTP/1.1 request without Host (raw sockets, real port)", () => {
  let stack: TestStack;
  let partner: Awaited<ReturnType<typeof partnerWithPayee>>;

  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    partner = await partnerWithPayee(stack, { scopes: ["kyc:read"] });
  });
  after(() => stack.close());

  const send = async (lines: string[]) => parseRawAnswer(await rawExchange(stack.url, [...lines, "", ""].join("\r\n")));

  it("a resource request: 400 invalid_request in the envelope, with X-Request-Id, no-store and Connection: close", async () => {
    const res = await send([`GET /api/partner/users/${partner.userId}/kyc HTTP/1.1`, `Authorization: Bearer ${partner.token}`]);
    expect(res.status).to.equal(400);
    expect(res.headers["x-request-id"]).to.match(UUID_RE);
    expect(res.headers["cache-control"]).to.equal("no-store");
    expect(res.headers.connection).to.equal("close");
    expect(res.body).to.deep.equal({ error: { code: "invalid_request", message: "malformed request", request_id: res.headers["x-request-id"] } });
  });

  it("the token endpoint: 400 invalid_request in its flat envelope, with no-store and no-cache", async () => {
    const res = await send(["POST /api/partner/oauth/token HTTP/1.1", "Content-Type: application/x-www-form-urlencoded", "Content-Length: 0"]);
    expect(res.status).to.equal(400);
    expect(res.headers["x-request-id"]).to.match(UUID_RE);
    expect([res.headers["cache-control"], res.headers.pragma]).to.deep.equal(["no-store", "no-cache"]);
    expect(res.body).to.deep.equal({ error: "invalid_request", error_description: "malformed request" });
  });

  it("an HTTP/1.0 request needs no Host, and the server answers normally afterwards", async () => {
    const res = await send([`GET /api/partner/users/${partner.userId}/kyc HTTP/1.0`, `Authorization: Bearer ${partner.token}`]);
    expect(res.status).to.equal(200);
    expect(res.body).to.include({ user_id: partner.userId });
  });
});
