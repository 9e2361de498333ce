import { expect } from "chai";
import http from "node:http";
import https from "node:https";
import type { AddressInfo } from "node:net";
import type { TLSSocket } from "node:tls";
import { pinnedRequest } from "../../core/net/pinned-request.js";
import { makeTestCerts, type TestCerts } from "../support/certs.js";

interface Seen {
  host?: string;
  servername?: string | false | null;
}

/** Sends `req` and answers the status. */
function answer(req: http.ClientRequest): Promise<number> {
  return new Promise((resolve, reject) => {
    req.on("error", reject);
    req.on("response", (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.end();
  });
}

/**
 * The outbound request both caller-chosen fetches use (client metadata documents, webhooks):
 * it connects only to the address it is given, whatever the URL's name resolves to now.
 */
describe("pinnedRequest: an outbound request pinned to a checked address", () => {
  let certs: TestCerts;
  let plain: http.Server;
  let secure: https.Server;
  const seen: Seen[] = [];
  const record = (req: http.IncomingMessage, res: http.ServerResponse) => {
    seen.push({ host: req.headers.host, servername: (req.socket as TLSSocket).servername });
    res.statusCode = 204;
    res.end();
  };
  const port = (s: http.Server) => (s.address() as AddressInfo).port;
  const loopback = { address: "127.0.0.1", family: 4 as const };

  before(async () => {
    certs = await makeTestCerts();
    plain = http.createServer(record);
    secure = https.createServer({ cert: certs.server.cert, key: certs.server.key }, record);
    await new Promise<void>((r) => plain.listen(0, "127.0.0.1", r));
    await new Promise<void>((r) => secure.listen(0, "127.0.0.1", r));
  });
  after(async () => {
    await new Promise((r) => plain.close(r));
    await new Promise((r) => secure.close(r));
    await certs.remove();
  });

  it("connects to the given address, not to what the URL's name resolves to, and keeps the name in Host", async () => {
    seen.length = 0;
    // No name server knows this name: only the pinned address can be reached.
    const url = new URL(`http://rebound.vaultgate.test:${port(plain)}/hook?x=1`);
    expect(await answer(pinnedRequest(url, loopback, { method: "POST", headers: {} }))).to.equal(204);
    expect(seen).to.deep.equal([{ host: `rebound.vaultgate.test:${port(plain)}`, servername: undefined }]);
  });

  it("over TLS the certificate is checked against the URL's name, sent as SNI; an IP literal sends none", async () => {
    seen.length = 0;
    const named = new URL(`https://localhost:${port(secure)}/doc`);
    expect(await answer(pinnedRequest(named, loopback, { method: "GET", headers: {}, ca: certs.ca }))).to.equal(204);
    const literal = new URL(`https://127.0.0.1:${port(secure)}/doc`);
    expect(await answer(pinnedRequest(literal, loopback, { method: "GET", headers: {}, ca: certs.ca }))).to.equal(204);
    expect(seen.map((s) => s.servername)).to.deep.equal(["localhost", false]);
    // Without the CA the certificate is not trusted.
    const untrusted = answer(pinnedRequest(named, loopback, { method: "GET", headers: {} }));
    const err = await untrusted.then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err).to.be.instanceOf(Error);
  });
});
