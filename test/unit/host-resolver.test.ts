import { expect } from "chai";
import { lookup } from "node:dns/promises";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { createClientIdMetadataResolver } from "../../core/grants/client-id-metadata.js";
import { createHostResolver } from "../../core/net/resolver.js";
import { startDocumentServer, type DocumentServer } from "../support/client-metadata-server.js";
import { startDnsServer, type TestDnsServer } from "../support/dns-server.js";
import { refusalOf } from "../support/refusals.js";

/**
 * Host names of client metadata documents are resolved by core's own bounded resolver
 * (c-ares, its own time limit and concurrency bound), not on the thread pool the rest of
 * core uses, against a real UDP name server in the test.
 */
describe("client metadata documents: host names resolved apart from the thread pool", function () {
  this.timeout(20_000);
  const clock = () => new Date("2026-01-01T00:00:00Z");
  let docs: DocumentServer;
  const servers: TestDnsServer[] = [];
  before(async () => {
    docs = await startDocumentServer();
  });
  after(async () => {
    await docs.close();
    for (const s of servers) await s.close();
  });

  async function dns(records: Record<string, string>, hold = false) {
    const s = await startDnsServer(records, { hold });
    servers.push(s);
    return s;
  }

  it("asks the configured name server and checks the address it gave against the private-address rules before connecting", async () => {
    const server = await dns({ "docs.vaultgate.test": "127.0.0.1" });
    const port = new URL(docs.origin).port;
    const path = docs.path("named");
    const url = `http://docs.vaultgate.test:${port}${path}`;
    const resolver = createHostResolver({ servers: [server.address] });
    // Private addresses are refused unless allowed (development), before connecting.
    const strict = createClientIdMetadataResolver({ clock, allowPrivate: false, resolver });
    expect((await refusalOf(strict.resolve(url.replace("http:", "https:")))).message).to.match(/non-public address/);
    expect(server.queries.map((q) => q.name)).to.include("docs.vaultgate.test");
    expect(docs.hits(url)).to.equal(0);
  });

  it("a name server that does not answer: the fetch fails with its own error, and the thread pool stays free meanwhile", async () => {
    const silent = await dns({}, true);
    const resolver = createHostResolver({ servers: [silent.address], timeoutMs: 1500 });
    const documents = createClientIdMetadataResolver({ clock, allowPrivate: false, resolver, timeoutMs: 5000 });
    // More lookups than libuv has pool threads (4 by default), all waiting on the silent server.
    let settled = 0;
    const pending = Array.from({ length: 8 }, (_, i) => refusalOf(documents.resolve(`https://slow-${i}.vaultgate.test/client.json`)).finally(() => settled++));
    while (silent.queries.length < 8) await new Promise((r) => setImmediate(r));
    // An unrelated lookup on the thread pool is answered while every one of them still waits.
    await lookup("localhost");
    expect(settled).to.equal(0);
    const answers = await Promise.all(pending);
    for (const a of answers) {
      expect(a.reason).to.equal(Reason.INVALID_CLIENT);
      expect(a.message).to.match(/its host name did not resolve in time \(no answer from the name server within 1.5 s\)/);
    }
  });

  it("over the concurrency bound a lookup fails at once as overload, without asking the name server", async () => {
    const silent = await dns({}, true);
    const resolver = createHostResolver({ servers: [silent.address], timeoutMs: 1500, maxConcurrent: 2 });
    const documents = createClientIdMetadataResolver({ clock, allowPrivate: false, resolver, timeoutMs: 5000 });
    const waiting = [0, 1].map((i) => refusalOf(documents.resolve(`https://busy-${i}.vaultgate.test/client.json`)));
    while (silent.queries.length < 4) await new Promise((r) => setImmediate(r)); // A and AAAA of each
    const over = await refusalOf(documents.resolve("https://busy-2.vaultgate.test/client.json"));
    expect(over.reason).to.equal(Reason.OVERLOADED);
    expect(silent.queries.map((q) => q.name)).to.not.include("busy-2.vaultgate.test");
    silent.release();
    for (const w of await Promise.all(waiting)) expect(w.message).to.match(/does not resolve|did not resolve in time/);
  });
});
