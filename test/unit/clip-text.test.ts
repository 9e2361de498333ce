import { expect } from "chai";
import { clipText } from "../../lib/text.js";

describe("clipText", () => {
  it("keeps text within the limit as it is", () => {
    expect(clipText("abc", 3)).to.equal("abc");
    expect(clipText("", 3)).to.equal("");
  });
  it("cuts at the limit in UTF-16 units", () => {
    expect(clipText("abcdef", 4)).to.equal("abcd");
  });
  it("drops a pair's first half rather than leave it alone at the end", () => {
    expect(clipText("ab\u{1F600}c", 3)).to.equal("ab");
    expect(clipText("ab\u{1F600}c", 4)).to.equal("ab\u{1F600}");
  });
});
