import { expect } from "chai";
import { parseRawAnswer, rawExchange } from "../../support/raw-http.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { partnerWithPayee } from "../../support/treasury.js";

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Headers Node would answer itself, bare: the gateway answers them as it answers every request. */
describe("partner API: a missing Host and an unknown Expect (raw sockets, real port)", () => {
  let stack: TestStack;
  let partner: Awaited<ReturnType<typeof partnerWithPayee>>;

  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    partner = await partnerWithPayee(stack, { scopes: ["kyc:read"] });
  });
  after(() => stack.close());

  /**
   * An HTTP/1.1 request without Host is a 400 (RFC 9112 3.2), answered like every other request the
   * gateway cannot take: a request id, the surface's envelope, no-store and the connection closed.
   */
  describe("without Host", () => {
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

    it("a path no envelope owns (the agent token endpoint): 400 in plain JSON, with X-Request-Id and Connection: close", async () => {
      const res = await send(["POST /oauth2/token HTTP/1.1", "Content-Type: application/x-www-form-urlencoded", "Content-Length: 0"]);
      expect(res.status).to.equal(400);
      expect(res.headers["x-request-id"]).to.match(UUID_RE);
      expect([res.headers["cache-control"], res.headers.connection]).to.deep.equal(["no-store", "close"]);
      expect(res.body).to.deep.equal({ error: "Bad Request", message: "Client Error", statusCode: 400 });
    });

    it("an HTTP/1.0 request needs no Host, and the server answers normally afterwards", async () => {
      const res = await send([`GET /api/partner/users/${partner.userId}/kyc HTTP/1.0`, `Authorization: Bearer ${partner.token}`]);
      expect(res.status).to.equal(200);
      expect(res.body).to.include({ user_id: partner.userId });
    });
  });

  /**
   * An `Expect` other than 100-continue (RFC 9110 10.1.1: a server may ignore it) is served like any
   * other request, so its answer still carries the surface's request id, envelope and cache headers.
   */
  describe("with an unknown Expect", () => {
    const send = async (lines: string[], body = "") =>
      parseRawAnswer(await rawExchange(stack.url, [...lines, "Host: 127.0.0.1", "Expect: a-thing", "Connection: close", "", body].join("\r\n")));

    it("a resource read answers as without it: 200 with X-Request-Id and no-store", async () => {
      const res = await send([`GET /api/partner/users/${partner.userId}/kyc HTTP/1.1`, `Authorization: Bearer ${partner.token}`]);
      expect(res.status).to.equal(200);
      expect(res.headers["x-request-id"]).to.match(UUID_RE);
      expect(res.headers["cache-control"]).to.equal("no-store");
      expect(res.body).to.include({ user_id: partner.userId, status: "not_started" });
    });

    it("a refused resource request keeps its envelope, its request id in the body", async () => {
      const res = await send([`GET /api/partner/users/${partner.userId}/kyc HTTP/1.1`]);
      expect(res.status).to.equal(401);
      expect(res.headers["www-authenticate"]).to.equal("Bearer");
      expect(res.body).to.deep.equal({
        error: { code: "invalid_token", message: "a bearer access token is required", request_id: res.headers["x-request-id"] },
      });
    });

    it("the token endpoint answers in its flat envelope with no-store and no-cache", async () => {
      const credentials = Buffer.from(`${partner.partner.clientId}:wrong`).toString("base64");
      const form = "grant_type=client_credentials";
      const res = await send(
        [
          "POST /api/partner/oauth/token HTTP/1.1",
          `Authorization: Basic ${credentials}`,
          "Content-Type: application/x-www-form-urlencoded",
          `Content-Length: ${form.length}`,
        ],
        form,
      );
      expect(res.status).to.equal(401);
      expect(res.headers["x-request-id"]).to.match(UUID_RE);
      expect([res.headers["cache-control"], res.headers.pragma]).to.deep.equal(["no-store", "no-cache"]);
      expect(res.headers["www-authenticate"]).to.equal('Basic realm="vaultgate-partner"');
      expect(res.body).to.deep.equal({ error: "invalid_client", error_description: "client authentication failed" });
    });
  });
});
