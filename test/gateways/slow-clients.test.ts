import { expect } from "chai";
import { rawExchange } from "../support/raw-http.js";
import { startStack, type TestStack } from "../support/stack.js";

/** Writes `head` and then nothing more, and returns all the server sends until it closes the connection. */
const stall = (url: string, head: string) => rawExchange(url, head, "utf8");

/**
 * A client that starts a request and never finishes it (slowloris) must not hold a
 * connection and its buffered body for ever: the gateway answers 408 and closes.
 */
describe("slow clients (gateway, real port)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, requestTimeoutMs: 1000 });
  });
  after(() => stack.close());

  /** A POST whose body stops 100 bytes short of its Content-Length. */
  const partialPost = (path: string, type: string, partial: string) =>
    [`POST ${path} HTTP/1.1`, "Host: 127.0.0.1", `Content-Type: ${type}`, `Content-Length: ${partial.length + 100}`, "", partial].join("\r\n");
  const bodyOf = (answer: string) => JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4)) as Record<string, unknown>;

  it("a token request whose body stops arriving gets the OAuth error and a closed connection; others are served", async () => {
    const head = partialPost("/oauth2/token", "application/x-www-form-urlencoded", "grant_type=authorization_code&code=");
    const [stalled, served] = await Promise.all([stall(stack.url, head), fetch(`${stack.url}/.well-known/oauth-authorization-server`)]);
    expect(served.status).to.equal(200);
    expect(stalled).to.match(/^HTTP\/1\.1 400 /);
    expect(stalled.toLowerCase()).to.include("connection: close");
    expect(bodyOf(stalled).error).to.equal("invalid_request");
  });

  it("a partner API body that stops arriving gets the partner envelope", async () => {
    const stalled = await stall(stack.url, partialPost("/api/partner/users", "application/json", '{"email":"'));
    expect(stalled).to.match(/^HTTP\/1\.1 400 /);
    expect((bodyOf(stalled).error as { code: string }).code).to.equal("invalid_request");
  });

  it("a JSON-RPC body that stops arriving gets 408 in the JSON-RPC envelope", async () => {
    const stalled = await stall(stack.url, partialPost("/mcp/read", "application/json", '{"jsonrpc":"2.0","id":1,"method":"'));
    expect(stalled).to.match(/^HTTP\/1\.1 408 /);
    expect((bodyOf(stalled).error as { code: number }).code).to.equal(-32600);
  });

  it("a sign-in form whose body stops arriving gets an HTML 400 page", async () => {
    const stalled = await stall(stack.url, partialPost("/signin", "application/x-www-form-urlencoded", "email=someone%40"));
    expect(stalled).to.match(/^HTTP\/1\.1 400 /);
    expect(stalled).to.match(/content-type: text\/html/i);
  });

  it("headers that stop arriving are answered 408 too", async () => {
    const stalled = await stall(stack.url, "GET /.well-known/oauth-authorization-server HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ");
    expect(stalled).to.match(/^HTTP\/1\.1 408 /);
    const after = await fetch(`${stack.url}/.well-known/oauth-authorization-server`);
    expect(after.status).to.equal(200);
  });
});
