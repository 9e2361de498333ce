import { expect } from "chai";
import { createHash, randomBytes } from "node:crypto";
import { sha256Base64url, sha256Hex } from "../../lib/crypto.js";

describe("sha256Hex / sha256Base64url", () => {
  it("match the published test vectors", () => {
    // FIPS 180-2 "abc", and RFC 7636 appendix B's verifier and S256 challenge.
    expect(sha256Hex("abc")).to.equal("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect(sha256Base64url("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")).to.equal("E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
  });

  it("agree with a Hash object on random and non-ASCII input (UTF-8, like the stored hashes)", () => {
    for (let i = 0; i < 200; i++) {
      const value = randomBytes(1 + (i % 90)).toString("base64url") + (i % 3 === 0 ? "é€😀" : "");
      expect(sha256Hex(value)).to.equal(createHash("sha256").update(value).digest("hex"));
      expect(sha256Base64url(value)).to.equal(createHash("sha256").update(value).digest("base64url"));
    }
  });
});
