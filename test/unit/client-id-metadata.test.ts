import { lookup } from "node:dns/promises";
import { expect } from "chai";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { cacheSeconds, checkClientIdUrl, createClientIdMetadataResolver, type ClientIdMetadataResolver } from "../../core/grants/client-id-metadata.js";
import { isPublicAddress } from "../../core/net/public-address.js";
import { DOCUMENT_REDIRECT, startDocumentServer, validDocument, type DocumentServer } from "../support/client-metadata-server.js";
import { makeTestCerts, type TestCerts } from "../support/certs.js";
import { refusalOf } from "../support/refusals.js";

describe("client ID metadata documents: the resolver", function () {
  this.timeout(20_000);
  let docs: DocumentServer;
  let now = Date.parse("2026-01-01T00:00:00Z");
  const clock = () => new Date(now);
  let dev: ClientIdMetadataResolver;
  before(async () => {
    docs = await startDocumentServer();
    dev = createClientIdMetadataResolver({ clock, allowPrivate: true });
  });
  after(() => docs.close());

  describe("client_id URL rules", () => {
    const refused: [string, RegExp][] = [
      ["http://example.com/client.json", /must use https/],
      ["ftp://example.com/client.json", /must use https/],
      ["https://example.com", /must have a path/],
      ["https://example.com/", /must have a path/],
      ["https://example.com/a#frag", /fragment/],
      ["https://user:pw@example.com/a", /credentials/],
      ["https://user@example.com/a", /credentials/],
      ["https://example.com/a/../b", /\. or \.\. path segments/],
      ["https://example.com/a/./b", /\. or \.\. path segments/],
      ["https://example.com/a/%2E%2e/b", /\. or \.\. path segments/],
      ["https://EXAMPLE.com/a", /canonical form/],
      ["https://example.com:443/a", /canonical form/],
      [`https://example.com/${"a".repeat(600)}`, /longer than 512/],
      ["https://exa mple.com/a", /not a valid URL/],
    ];
    for (const [url, why] of refused) {
      it(`refuses ${url.slice(0, 60)}`, async () => {
        const r = await refusalOf(() => checkClientIdUrl(url, false));
        expect(r.reason).to.equal(Reason.INVALID_CLIENT);
        expect(r.message).to.match(why);
      });
    }

    it("accepts https URLs with a path, a port or a query", () => {
      for (const url of ["https://example.com/client.json", "https://example.com:8443/oauth/client", "https://example.com/c?v=1"]) {
        expect(checkClientIdUrl(url, false).href).to.equal(url);
      }
    });

    it("accepts http only on loopback and only with the development setting", async () => {
      expect(checkClientIdUrl("http://127.0.0.1:8080/c.json", true).host).to.equal("127.0.0.1:8080");
      expect(checkClientIdUrl("http://[::1]:8080/c.json", true).hostname).to.equal("[::1]");
      expect((await refusalOf(() => checkClientIdUrl("http://127.0.0.1:8080/c.json", false))).message).to.match(/must use https/);
      expect((await refusalOf(() => checkClientIdUrl("http://example.com/c.json", true))).message).to.match(/http only on loopback/);
    });
  });

  describe("address rule", () => {
    it("refuses private, loopback, link-local, multicast, unique-local and reserved addresses", () => {
      const blocked = [
        "0.0.0.0",
        "10.1.2.3",
        "100.64.0.1",
        "127.0.0.1",
        "127.255.0.9",
        "169.254.169.254",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "192.0.0.8",
        "192.0.2.1",
        "198.18.0.1",
        "198.51.100.2",
        "203.0.113.5",
        "224.0.0.1",
        "239.1.1.1",
        "240.0.0.1",
        "255.255.255.255",
        "::",
        "::1",
        "fe80::1",
        "fc00::1",
        "fd12:3456::1",
        "ff02::1",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "::ffff:7f00:1",
        "64:ff9b::a00:1",
        "2001:db8::1",
        "3fff::1",
        "3fff:fff:ffff::1",
        "192.88.99.1",
        "2002:a00:1::1",
        "2001::1",
        "fe80::1%eth0",
        "not-an-ip",
      ];
      for (const a of blocked) expect(isPublicAddress(a), a).to.equal(false);
      for (const a of [
        "8.8.8.8",
        "1.1.1.1",
        "172.32.0.1",
        "100.128.0.1",
        "2606:4700::1111",
        "2a00:1450::1",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "3fff:1000::1",
        "192.88.100.1",
      ]) {
        expect(isPublicAddress(a), a).to.equal(true);
      }
    });

    it("refuses a document on a private address before connecting when the development setting is off", async () => {
      const prod = createClientIdMetadataResolver({ clock, allowPrivate: false });
      const path = docs.path("private");
      // Reachable over https? It does not matter: nothing may connect. (The server speaks
      // http; an attempt would show as a hit either way.)
      docs.serve(path, validDocument(`https://127.0.0.1:${new URL(docs.origin).port}${path}`));
      const port = new URL(docs.origin).port;
      for (const host of [
        `127.0.0.1:${port}`,
        `localhost:${port}`,
        `[::1]:${port}`,
        `[::ffff:7f00:1]:${port}`,
        "10.0.0.1",
        "169.254.169.254",
        "[fe80::1]",
        "[fd00::1]",
      ]) {
        const r = await refusalOf(prod.resolve(`https://${host}${path}`));
        expect(r.reason, host).to.equal(Reason.INVALID_CLIENT);
        expect(r.message, host).to.match(/private, loopback, link-local or otherwise non-public address/);
      }
      expect(docs.hits(path)).to.equal(0);
    });
  });

  describe("fetching (loopback document server, development setting on)", () => {
    it("resolves a valid document to a public client", async () => {
      const url = docs.document({ scope: "accounts:read openid profile" });
      const c = await dev.resolve(url);
      expect(c).to.include({ clientId: url, clientName: "Document agent", tokenEndpointAuthMethod: "none", secretHash: null, metadataDocument: true });
      expect(c.redirectUris).to.deep.equal([DOCUMENT_REDIRECT]);
      // Scope names of other servers are ignored; ours bound what the client may ask.
      expect(c.scopes).to.deep.equal(["accounts:read"]);
      const all = await dev.resolve(
        docs.document({ scope: undefined, token_endpoint_auth_method: undefined, grant_types: undefined, response_types: undefined }),
      );
      expect(all.scopes).to.have.length(5);
      expect(all.grantTypes).to.deep.equal(["authorization_code", "refresh_token"]);
    });

    const cases: [string, (url: string, path: string) => void, RegExp][] = [
      ["a wrong client_id", (url, path) => docs.serve(path, validDocument(`${url}x`)), /client_id must equal the URL/],
      ["a client_id differing only in case", (url, path) => docs.serve(path, validDocument(url.toUpperCase())), /client_id must equal the URL/],
      ["no client_id", (url, path) => docs.serve(path, validDocument(url, { client_id: undefined })), /client_id must equal the URL/],
      ["an oversized document", (url, path) => docs.serve(path, validDocument(url, { padding: "x".repeat(6000) })), /larger than 5120 bytes/],
      [
        "an oversized document without Content-Length",
        (url, path) =>
          docs.route(path, (_req, res) => {
            res.writeHead(200, { "content-type": "application/json" });
            for (let i = 0; i < 10; i++) res.write(" ".repeat(1000));
            res.end(JSON.stringify(validDocument(url)));
          }),
        /larger than 5120 bytes/,
      ],
      [
        "a redirect",
        (url, path) => {
          const target = docs.document();
          docs.route(path, (_req, res) => {
            res.writeHead(302, { location: target });
            res.end();
          });
          void url;
        },
        /redirect \(HTTP 302\); redirects are not followed/,
      ],
      ["not JSON", (_url, path) => docs.serve(path, "<html>hello</html>", { "content-type": "text/html" }), /is not JSON/],
      ["invalid UTF-8", (_url, path) => docs.serve(path, Buffer.from([0x7b, 0xff, 0x7d])), /is not JSON/],
      ["a JSON array", (_url, path) => docs.serve(path, "[]"), /must be a JSON object/],
      [
        "an http redirect URI off loopback",
        (url, path) => docs.serve(path, validDocument(url, { redirect_uris: ["http://agent.example/cb"] })),
        /https \(http only on loopback\)/,
      ],
      ["no redirect URIs", (url, path) => docs.serve(path, validDocument(url, { redirect_uris: [] })), /at least one URI/],
      [
        "redirect URIs that are not strings",
        (url, path) => docs.serve(path, validDocument(url, { redirect_uris: "https://a.example/cb" })),
        /redirect_uris must be an array of strings/,
      ],
      ["a fragment in a redirect URI", (url, path) => docs.serve(path, validDocument(url, { redirect_uris: ["https://a.example/cb#x"] })), /fragment/],
      [
        "private_key_jwt",
        (url, path) => docs.serve(path, validDocument(url, { token_endpoint_auth_method: "private_key_jwt", jwks_uri: "https://a.example/jwks" })),
        /private_key_jwt is not supported here; use none/,
      ],
      [
        "client_secret_basic",
        (url, path) => docs.serve(path, validDocument(url, { token_endpoint_auth_method: "client_secret_basic" })),
        /token_endpoint_auth_method must be none/,
      ],
      ["a client_secret", (url, path) => docs.serve(path, validDocument(url, { client_secret: "s3cret" })), /must not contain a client_secret/],
      ["an implicit response type", (url, path) => docs.serve(path, validDocument(url, { response_types: ["token"] })), /response_types/],
      ["a NUL in the name", (url, path) => docs.serve(path, validDocument(url, { client_name: "a\u0000b" })), /NUL/],
      ["only foreign scopes", (url, path) => docs.serve(path, validDocument(url, { scope: "openid profile" })), /scope names none of/],
      ["HTTP 404", (_url, path) => docs.serve(path, {}, {}, 404), /answered HTTP 404/],
      ["a compressed body", (url, path) => docs.serve(path, validDocument(url), { "content-encoding": "gzip" }), /must not be compressed/],
    ];
    for (const [name, setup, why] of cases) {
      it(`refuses ${name} with invalid_client and the reason`, async () => {
        const path = docs.path("bad");
        const url = docs.origin + path;
        setup(url, path);
        const r = await refusalOf(dev.resolve(url));
        expect(r.reason).to.equal(Reason.INVALID_CLIENT);
        expect(r.message).to.match(/^client_id metadata document: /);
        expect(r.message).to.match(why);
        expect(docs.hits(path)).to.equal(1);
      });
    }

    it("refuses a server that does not answer in time", async () => {
      const quick = createClientIdMetadataResolver({ clock, allowPrivate: true, timeoutMs: 300 });
      const path = docs.path("slow");
      docs.route(path, () => undefined);
      const r = await refusalOf(quick.resolve(docs.origin + path));
      expect(r.reason).to.equal(Reason.INVALID_CLIENT);
      expect(r.message).to.equal("client_id metadata document: no answer within 0.3 s");
      expect(docs.hits(path)).to.equal(1);
    });

    it("refuses a host name that does not resolve", async () => {
      const r = await refusalOf(dev.resolve("https://no-such-host.invalid/client.json"));
      expect(r.message).to.match(/does not resolve/);
    });

    it("refuses a connection that fails", async () => {
      // An https client_id at the plain-http server: the TLS handshake fails.
      const r = await refusalOf(dev.resolve(`https://127.0.0.1:${new URL(docs.origin).port}/clients/tls.json`));
      expect(r.message).to.equal("client_id metadata document: the document could not be fetched");
    });
  });

  describe("caching", () => {
    it("serves the document from the cache for max-age, then fetches again", async () => {
      const url = docs.document({}, { "cache-control": "public, max-age=600" });
      await dev.resolve(url);
      await dev.resolve(url);
      expect(docs.hits(url)).to.equal(1);
      now += 599_000;
      await dev.resolve(url);
      expect(docs.hits(url)).to.equal(1);
      now += 2_000;
      await dev.resolve(url);
      expect(docs.hits(url)).to.equal(2);
    });

    it("caches 5 minutes by default and at least a minute even for no-store", async () => {
      const plain = docs.document();
      const noStore = docs.document({}, { "cache-control": "no-store" });
      await dev.resolve(plain);
      await dev.resolve(noStore);
      now += 59_000;
      await dev.resolve(plain);
      await dev.resolve(noStore);
      expect([docs.hits(plain), docs.hits(noStore)]).to.deep.equal([1, 1]);
      now += 2_000;
      await dev.resolve(noStore);
      expect(docs.hits(noStore)).to.equal(2);
      now += 240_000;
      await dev.resolve(plain);
      expect(docs.hits(plain)).to.equal(2);
    });

    it("bounds max-age to a day", () => {
      expect(cacheSeconds("max-age=31536000")).to.equal(86_400);
      expect(cacheSeconds("max-age=5")).to.equal(60);
      expect(cacheSeconds("private, max-age=900")).to.equal(900);
      expect(cacheSeconds(undefined)).to.equal(300);
      expect(cacheSeconds("no-cache, max-age=900")).to.equal(60);
      expect(cacheSeconds("max-age=abc")).to.equal(300);
    });

    it("fetches once for concurrent first uses", async () => {
      const url = docs.document();
      const clients = await Promise.all(Array.from({ length: 10 }, () => dev.resolve(url)));
      expect(new Set(clients.map((c) => c.clientId))).to.deep.equal(new Set([url]));
      expect(docs.hits(url)).to.equal(1);
    });

    it("does not cache a refusal: a fixed document works on the next try", async () => {
      const path = docs.path("fixed");
      const url = docs.origin + path;
      docs.serve(path, validDocument(url, { redirect_uris: ["http://agent.example/cb"] }));
      await refusalOf(dev.resolve(url));
      docs.serve(path, validDocument(url));
      expect((await dev.resolve(url)).clientId).to.equal(url);
    });
  });

  describe("https", () => {
    let certs: TestCerts;
    let secure: DocumentServer;
    before(async () => {
      certs = await makeTestCerts();
      secure = await startDocumentServer({ cert: certs.server.cert, key: certs.server.key });
    });
    after(async () => {
      await secure.close();
      await certs.remove();
    });

    it("fetches over TLS, checking the certificate against the URL's host", async () => {
      const withCa = createClientIdMetadataResolver({ clock, allowPrivate: true, ca: certs.ca });
      const url = secure.document();
      expect((await withCa.resolve(url)).clientId).to.equal(url);
      // Without the test CA the certificate is not trusted: refused, not a 5xx.
      const strict = createClientIdMetadataResolver({ clock, allowPrivate: true });
      const other = secure.document();
      expect((await refusalOf(strict.resolve(other))).message).to.match(/could not be fetched/);
    });

    it("resolves a host name itself and connects to the checked address, with the name for TLS", async () => {
      // Bound to whatever localhost resolves to first here, the address core will pick.
      const first = (await lookup("localhost", { all: true, verbatim: true }))[0]!;
      const named = await startDocumentServer({ cert: certs.server.cert, key: certs.server.key }, { host: first.address, name: "localhost" });
      try {
        const withCa = createClientIdMetadataResolver({ clock, allowPrivate: true, ca: certs.ca });
        const url = named.document();
        expect(url).to.match(/^https:\/\/localhost:\d+\//);
        expect((await withCa.resolve(url)).clientId).to.equal(url);
        expect(named.hits(url)).to.equal(1);
      } finally {
        await named.close();
      }
    });
  });
});
