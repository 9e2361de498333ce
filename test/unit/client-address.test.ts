import { expect } from "chai";
import { createClientAddress, parseTrustProxy } from "../../gateways/shared/client-address.js";

/**
 * The one function that decides a request's client address (the nginx suite runs it
 * behind a real proxy; these are the spellings nginx does not produce).
 */
describe("client address (TRUST_PROXY walk)", () => {
  const byCidr = createClientAddress(parseTrustProxy("10.0.0.0/8, fd00::/8"));
  const byHops = createClientAddress(parseTrustProxy("2"));
  const off = createClientAddress(parseTrustProxy(undefined));

  it("off: the peer, whatever is forwarded; IPv4-mapped peers read as IPv4", () => {
    expect(off("203.0.113.9", { "x-forwarded-for": "1.1.1.1", forwarded: "for=1.1.1.1" })).to.equal("203.0.113.9");
    expect(off("::ffff:203.0.113.9", {})).to.equal("203.0.113.9");
    expect(off("2001:DB8::1", {})).to.equal("2001:db8::1");
  });

  it("CIDRs: skips our proxies from the right; the first other hop is the client", () => {
    expect(byCidr("10.0.0.1", { "x-forwarded-for": "198.51.100.7, 10.1.2.3" })).to.equal("198.51.100.7");
    expect(byCidr("10.0.0.1", { "x-forwarded-for": "192.0.2.1, 198.51.100.7" }), "a client's own entries are left of it").to.equal("198.51.100.7");
    expect(byCidr("198.51.100.7", { "x-forwarded-for": "192.0.2.1" }), "an untrusted peer forwards nothing").to.equal("198.51.100.7");
    expect(byCidr("::ffff:10.0.0.1", { "x-forwarded-for": "198.51.100.7" })).to.equal("198.51.100.7");
    expect(byCidr("fd00::5", { "x-forwarded-for": "[2001:db8::7]:4711" })).to.equal("2001:db8::7");
    expect(byCidr("10.0.0.1", { "x-forwarded-for": "198.51.100.7:5555" })).to.equal("198.51.100.7");
    expect(byCidr("10.0.0.1", { "x-forwarded-for": "10.0.0.2, 10.0.0.3" }), "all ours: the farthest").to.equal("10.0.0.2");
  });

  it("an entry that is not an address stops the walk at the proxy that reported it", () => {
    expect(byCidr("10.0.0.1", { "x-forwarded-for": "evil" })).to.equal("10.0.0.1");
    expect(byCidr("10.0.0.1", { "x-forwarded-for": "198.51.100.7, garbage, 10.0.0.9" })).to.equal("10.0.0.9");
    expect(byCidr("10.0.0.1", { forwarded: "for=unknown" })).to.equal("10.0.0.1");
    expect(byCidr("10.0.0.1", { forwarded: "for=_hidden" })).to.equal("10.0.0.1");
  });

  it("RFC 7239 Forwarded: quoted and bracketed nodes, ports, other parameters, case", () => {
    expect(byCidr("10.0.0.1", { forwarded: 'for="[2001:db8:cafe::17]:4711";proto=https;by=10.0.0.1' })).to.equal("2001:db8:cafe::17");
    expect(byCidr("10.0.0.1", { forwarded: "For=192.0.2.60;proto=http, for=10.2.2.2" })).to.equal("192.0.2.60");
    expect(byCidr("10.0.0.1", { forwarded: 'for="192.0.2.60:8080"' })).to.equal("192.0.2.60");
    expect(byCidr("10.0.0.1", { forwarded: "proto=https" }), "no for=").to.equal("10.0.0.1");
    expect(byCidr("10.0.0.1", { forwarded: 'for="192.0.2.60' }), "unterminated quote").to.equal("10.0.0.1");
    expect(byCidr("10.0.0.1", { forwarded: "for=192.0.2.60;for=192.0.2.61" }), "two for= in one element").to.equal("10.0.0.1");
    expect(byCidr("10.0.0.1", { forwarded: 'for="a,b", for=198.51.100.7' }), "a comma inside quotes").to.equal("198.51.100.7");
  });

  it("both headers: believed when they agree, the peer when they differ", () => {
    expect(byCidr("10.0.0.1", { "x-forwarded-for": "198.51.100.7", forwarded: "for=198.51.100.7" })).to.equal("198.51.100.7");
    expect(byCidr("10.0.0.1", { "x-forwarded-for": "198.51.100.7", forwarded: "for=192.0.2.1" })).to.equal("10.0.0.1");
  });

  it("hop count: the peer and the n-1 nearest entries are ours, whatever their address", () => {
    expect(byHops("203.0.113.1", { "x-forwarded-for": "192.0.2.1, 198.51.100.7, 203.0.113.2" })).to.equal("198.51.100.7");
    expect(byHops("203.0.113.1", { "x-forwarded-for": "198.51.100.7" }), "fewer entries than hops: the farthest").to.equal("198.51.100.7");
    expect(byHops("203.0.113.1", {}), "nothing forwarded").to.equal("203.0.113.1");
  });
});
