import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";

/**
 * RFC 7591 registration is open (no initial access token), so its body must be bounded:
 * 16 KiB of JSON (docs/reference/agent-oauth.md). An oversized body is refused before the handler
 * runs: no client is created, nothing is hashed or audited.
 */
describe("POST /oauth2/register body limit", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  const registrations = async () => Number((await stack.core.db("oauth_clients").count({ n: "*" }))[0]!.n);
  const body = (padding: number) => JSON.stringify({ client_name: "x".repeat(padding), redirect_uris: ["http://127.0.0.1:9/callback"] });

  it("accepts a body of exactly 16 KiB", async () => {
    const text = body(0);
    const exact = body(16 * 1024 - text.length);
    expect(Buffer.byteLength(exact)).to.equal(16 * 1024);
    const res = await fetch(`${stack.url}/oauth2/register`, { method: "POST", headers: { "content-type": "application/json" }, body: exact });
    // Reaches core (which then judges the metadata); the body limit did not refuse it.
    expect(res.status).to.not.equal(413);
    expect(((await res.json()) as { error_description?: string }).error_description).to.not.equal("request body too large");
  });

  for (const [label, headers, payload] of [
    ["one byte over, with Content-Length", { "content-type": "application/json" }, () => body(16 * 1024 - body(0).length + 1)],
    ["1 MiB", { "content-type": "application/json" }, () => body(1024 * 1024)],
    ["1 MiB under another content type", { "content-type": "text/plain" }, () => body(1024 * 1024)],
  ] as const) {
    it(`refuses ${label}: 400 invalid_client_metadata, no client created`, async () => {
      const before = await registrations();
      const res = await fetch(`${stack.url}/oauth2/register`, { method: "POST", headers, body: payload() });
      expect(res.status).to.equal(400);
      expect(res.headers.get("content-type")).to.match(/^application\/json/);
      const json = (await res.json()) as { error: string; error_description: string };
      expect(json.error).to.equal("invalid_client_metadata");
      expect(json.error_description).to.equal("request body too large");
      expect(await registrations()).to.equal(before);
    });
  }

  it("refuses an oversized chunked body (no Content-Length) the same way", async () => {
    const before = await registrations();
    const chunk = new TextEncoder().encode("x".repeat(8192));
    let sent = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (sent++ < 8) controller.enqueue(chunk);
        else controller.close();
      },
    });
    const res = await fetch(`${stack.url}/oauth2/register`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: stream,
      duplex: "half",
    } as RequestInit);
    expect(res.status).to.equal(400);
    expect(await res.json()).to.deep.equal({ error: "invalid_client_metadata", error_description: "request body too large" });
    expect(await registrations()).to.equal(before);
  });
});
