import { expect } from "chai";
import { startStack, type TestStack } from "../support/stack.js";
import { expectHttpError, expectOAuthError } from "../support/refusals.js";
import { parseRawAnswer, rawExchange } from "../support/raw-http.js";
import { api } from "../support/resources.js";

/** A known address asked with the wrong method is 405 with `Allow`, in its surface's envelope. */
describe("Wrong method on a known address: 405 with Allow (HTTP)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack.close());

  const call = (method: string, path: string) => fetch(`${stack.url}${path}`, { method, redirect: "manual" });

  it("the OAuth endpoints answer POST only, with an OAuth error body", async () => {
    for (const path of ["/oauth2/token", "/oauth2/register", "/oauth2/revoke", "/oauth2/token?grant_type=refresh_token"]) {
      const res = await call("GET", path);
      expect([res.status, res.headers.get("allow"), res.headers.get("cache-control")], path).to.deep.equal([405, "POST", "no-store"]);
      const body = (await res.json()) as { error: string; error_description: string };
      expect(body.error, path).to.equal("invalid_request");
      expect(body.error_description).to.match(/answers POST only$/);
    }
  });

  it("the partner token endpoint answers in its flat OAuth envelope, its resources in theirs", async () => {
    for (const method of ["GET", "PUT", "DELETE"]) {
      const token = await call(method, "/api/partner/oauth/token");
      const body = await expectOAuthError(token, 405, "invalid_request");
      expect([token.headers.get("allow"), body.error_description], method).to.deep.equal(["POST", "this endpoint answers POST only"]);
    }
    for (const method of ["DELETE", "POST", "PUT"]) {
      const kyc = await api(stack, method, "/users/usr_123/kyc");
      expectHttpError(kyc, 405, "method_not_allowed");
      expect(kyc.headers.get("allow"), method).to.equal("GET, HEAD");
    }
  });

  it("the MCP endpoints answer POST only, with no body", async () => {
    for (const method of ["GET", "DELETE", "PUT", "HEAD"]) {
      const res = await call(method, "/mcp/write");
      expect([res.status, res.headers.get("allow")], method).to.deep.equal([405, "POST"]);
      expect(await res.text()).to.equal("");
    }
  });

  it("a page that only takes a form post shows a page, and probes answer GET", async () => {
    const signout = await call("GET", "/signout");
    expect([signout.status, signout.headers.get("allow")]).to.deep.equal([405, "POST"]);
    expect(signout.headers.get("content-type")).to.match(/^text\/html/);
    expect(await signout.text()).to.include("cannot be opened this way");
    const health = await call("POST", "/healthz");
    expect([health.status, health.headers.get("allow")]).to.deep.equal([405, "GET, HEAD"]);
  });

  it("an address no route serves is still 404", async () => {
    expect((await call("GET", "/oauth2/nothing")).status).to.equal(404);
    expectHttpError(await api(stack, "GET", "/users/usr_123/nothing"), 404, "not_found");
    expect((await call("GET", "/signout/elsewhere")).status).to.equal(404);
  });

  it("CONNECT (a proxy tunnel, served nowhere) is 405 with Allow, a request id and a closed connection", async () => {
    for (const target of ["vaultgate.example:443", "/api/partner/events", "/mcp/write"]) {
      const answer = parseRawAnswer(await rawExchange(stack.url, `CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`));
      expect([answer.status, answer.headers.connection, answer.headers["cache-control"]], target).to.deep.equal([405, "close", "no-store"]);
      expect(answer.headers.allow, target).to.include("GET");
      expect(answer.headers["x-request-id"], target).to.match(/^[0-9a-f-]{36}$/);
      expect(answer.body, target).to.deep.equal({ error: "Method Not Allowed", message: "CONNECT is not served here", statusCode: 405 });
    }
    expect((await call("GET", "/healthz")).status).to.equal(200);
  });
});
