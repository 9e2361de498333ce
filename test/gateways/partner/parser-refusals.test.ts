import { expect } from "chai";
import { parseRawAnswer, rawExchange } from "../../support/raw-http.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { api } from "../../support/resources.js";
import { partnerWithPayee } from "../../support/treasury.js";
import { loadOpenApi } from "../../support/openapi.js";

const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** Sends `request` on a fresh connection and returns all the server sends until the connection closes. */
const exchange = (url: string, request: string) => rawExchange(url, request);

const parse = parseRawAnswer;

/**
 * A request whose request line and headers pass Node's 16 KiB limit never reaches a route: it is
 * still answered with a request id and a closed connection, on the partner API in its envelope.
 */
describe("partner API: requests the HTTP parser refuses (raw sockets, real port)", () => {
  let stack: TestStack;
  let token: string;
  let userId: string;

  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    ({ token, userId } = await partnerWithPayee(stack, { scopes: ["kyc:read"] }));
  });
  after(() => stack.close());

  const get = (target: string, headers: string[] = []) => [`GET ${target} HTTP/1.1`, "Host: 127.0.0.1", ...headers, "", ""].join("\r\n");
  const bearer = () => `Authorization: Bearer ${token}`;

  const overLimit = () => [
    ["an over-long request line", get(`/api/partner/users/${"u".repeat(20_000)}/kyc`, [bearer()])],
    ["an over-long query", get(`/api/partner/events?cursor=${"c".repeat(70_000)}`, [bearer()])],
    ["an over-long header", get(`/api/partner/users/${userId}/kyc`, [bearer(), `X-Padding: ${"p".repeat(20_000)}`])],
    [
      "many headers over the limit together",
      get(
        "/api/partner/events",
        Array.from({ length: 40 }, (_, i) => `X-Pad-${i}: ${"p".repeat(500)}`),
      ),
    ],
  ];

  for (const [label, request] of overLimit()) {
    it(`${label}: 431 request_header_fields_too_large in the envelope, with X-Request-Id and Connection: close`, async () => {
      const res = parse(await exchange(stack.url, request ?? ""));
      expect(res.status).to.equal(431);
      expect(res.headers["content-type"]).to.match(/^application\/json/);
      expect(res.headers["cache-control"]).to.equal("no-store");
      expect(res.headers.connection).to.equal("close");
      const requestId = res.headers["x-request-id"];
      expect(requestId).to.match(UUID_RE);
      expect(res.body).to.deep.equal({
        error: { code: "request_header_fields_too_large", message: "the request line and headers are over the server's 16 KiB limit", request_id: requestId },
      });
    });
  }

  it("an over-long request to the token endpoint: 431 in its flat OAuth envelope, with a request id", async () => {
    const res = parse(await exchange(stack.url, get(`/api/partner/oauth/token?${"t".repeat(20_000)}`)));
    expect(res.status).to.equal(431);
    expect(res.headers["x-request-id"]).to.match(UUID_RE);
    expect(res.body).to.deep.equal({ error: "invalid_request", error_description: "the request line and headers are over the server's 16 KiB limit" });
    // As every answer of a token endpoint (RFC 6749 5.1).
    expect([res.headers["cache-control"], res.headers.pragma]).to.deep.equal(["no-store", "no-cache"]);
  });

  it("a request line the parser cannot read on a partner path: 400 invalid_request in the envelope, with a request id", async () => {
    const res = parse(await exchange(stack.url, "GET /api/partner/events HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n"));
    expect(res.status).to.equal(400);
    expect(res.headers["x-request-id"]).to.match(UUID_RE);
    expect(res.body).to.deep.equal({ error: { code: "invalid_request", message: "malformed request", request_id: res.headers["x-request-id"] } });
  });

  it("other paths over the limit: a well-formed 431 with a request id, never a 5xx", async () => {
    for (const target of [
      `/.well-known/oauth-authorization-server?${"q".repeat(20_000)}`,
      `/mcp/read/${"m".repeat(20_000)}`,
      `/api/partnerx/${"x".repeat(20_000)}`,
    ]) {
      const res = parse(await exchange(stack.url, get(target)));
      expect(res.status, target.slice(0, 40)).to.equal(431);
      expect(res.headers["x-request-id"]).to.match(UUID_RE);
      expect(res.headers.connection).to.equal("close");
      expect(res.body).to.deep.equal({ error: "Request Header Fields Too Large", message: "Exceeded maximum allowed HTTP header size", statusCode: 431 });
    }
  });

  it("fetch sees the same 431 envelope, as the OpenAPI document describes it, and the server answers normally afterwards", async () => {
    const openapi = await loadOpenApi(stack.url);
    const path = `/users/${"u".repeat(20_000)}/kyc`;
    const res = await api(stack, "GET", path, { token });
    expect(res.status).to.equal(431);
    openapi.check("GET", path, res);
    const events = await api(stack, "GET", `/events?cursor=${"c".repeat(20_000)}`, { token });
    openapi.check("GET", "/events", events);
    expect((res.body as { error: { code: string; request_id: string } }).error).to.include({
      code: "request_header_fields_too_large",
      request_id: res.headers.get("x-request-id"),
    });
    expect((await api(stack, "GET", `/users/${userId}/kyc`, { token })).status).to.equal(200);
  });
});
