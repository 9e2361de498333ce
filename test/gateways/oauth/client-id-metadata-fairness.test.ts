import http from "node:http";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { pkce } from "../../support/agent-oauth.js";
import { DOCUMENT_REDIRECT, startDocumentServer, type DocumentServer } from "../../support/client-metadata-server.js";
import { MAX_FETCHES_PER_CALLER } from "../../../core/grants/client-id-metadata.js";

/** Metadata document fetches are shared per client address: one caller naming slow documents starves only itself. */
describe("client ID metadata document fetches under a flood of slow documents", function () {
  this.timeout(30_000);
  let stack: TestStack;
  let docs: DocumentServer;
  before(async () => {
    docs = await startDocumentServer();
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 }, clientMetadataAllowPrivate: true });
  });
  after(async () => {
    await stack.close();
    await docs.close();
  });

  /** GET /oauth2/authorize for `clientId` from the loopback address `from`: the status and where it sends the browser. */
  function authorizeFrom(from: string, clientId: string): Promise<{ status: number; location: string }> {
    const query = new URLSearchParams({
      response_type: "code",
      client_id: clientId,
      redirect_uri: DOCUMENT_REDIRECT,
      code_challenge: pkce().challenge,
      code_challenge_method: "S256",
      scope: "accounts:read",
      state: "st",
    });
    return new Promise((resolve, reject) => {
      const req = http.get(`${stack.url}/oauth2/authorize?${query}`, { localAddress: from, agent: false }, (res) => {
        res.resume();
        res.on("end", () => resolve({ status: res.statusCode ?? 0, location: String(res.headers.location ?? "") }));
      });
      req.on("error", reject);
    });
  }

  it("an address naming 40 documents that never answer holds a few fetches; another address's new client is served", async () => {
    const answered: { status: number }[] = [];
    const flood = Array.from({ length: 40 }, () => {
      const slow = docs.path("slow");
      docs.route(slow, () => undefined);
      return authorizeFrom("127.0.0.2", docs.origin + slow).then((r) => answered.push(r));
    });
    // What the flooder is refused at once has answered; the rest hold their fetches.
    for (let i = 0; i < 500 && answered.length < 40 - MAX_FETCHES_PER_CALLER; i++) await new Promise((r) => setTimeout(r, 10));
    expect(answered.map((r) => r.status)).to.deep.equal(Array.from({ length: 40 - MAX_FETCHES_PER_CALLER }, () => 503));

    const honest = await authorizeFrom("127.0.0.3", docs.document({}, {}, "honest"));
    expect(honest.status).to.be.oneOf([302, 303]);
    expect(honest.location).to.match(/^\/signin\?/);
    await Promise.all(flood);
  });
});
