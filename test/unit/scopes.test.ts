import { expect } from "chai";
import { parseScope } from "../../lib/scopes.js";

describe("scope parsing (RFC 6749 3.3), shared by agent grants and partner tokens", () => {
  it("splits on single spaces and folds duplicates", () => {
    expect(parseScope("accounts:read")).to.deep.equal(["accounts:read"]);
    expect(parseScope("kyc:read wallet:read kyc:read")).to.deep.equal(["kyc:read", "wallet:read"]);
  });

  it("gives [] only for the empty string (omitted or sent without a value), which each caller reads as its own default or refusal", () => {
    expect(parseScope("")).to.deep.equal([]);
  });

  it("refuses anything else: only spaces, doubled, leading or trailing spaces, other whitespace, quote, backslash, non-ASCII", () => {
    for (const bad of [" ", "  ", "\t", " \n ", "a  b", " a", "a ", "a\tb", 'a"b', "a\\b", "caf\u00e9", "a\u00a0b"]) {
      expect(parseScope(bad), JSON.stringify(bad)).to.equal(undefined);
    }
  });
});
