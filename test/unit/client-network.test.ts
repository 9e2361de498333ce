import { expect } from "chai";
import { clientNetwork } from "../../lib/client-network.js";

describe("clientNetwork: what a per-address limit counts", () => {
  it("an IPv4 address (also written as IPv4-mapped IPv6) is itself", () => {
    expect(clientNetwork("198.51.100.7")).to.equal("198.51.100.7");
    expect(clientNetwork("::ffff:198.51.100.7")).to.equal("198.51.100.7");
    expect(clientNetwork("::FFFF:198.51.100.7")).to.equal("198.51.100.7");
  });

  it("every spelling of an IPv6 address within one /64 is that /64", () => {
    const net = "2001:db8:1:2::/64";
    for (const a of ["2001:db8:1:2::1", "2001:0db8:0001:0002:ffff:ffff:ffff:ffff", "2001:DB8:1:2:0:0:0:0", "2001:db8:1:2::192.0.2.1", "2001:db8:1:2::1%eth0"]) {
      expect(clientNetwork(a), a).to.equal(net);
    }
    expect(clientNetwork("2001:db8:1:3::1")).to.not.equal(net);
    expect(clientNetwork("::1")).to.equal("0:0:0:0::/64");
    expect(clientNetwork("2001:db8::")).to.equal("2001:db8:0:0::/64");
  });

  it("anything that is not an address (nobody vouched: direct callers) is kept as it is", () => {
    expect(clientNetwork("")).to.equal("");
    expect(clientNetwork("not-an-address")).to.equal("not-an-address");
  });
});
