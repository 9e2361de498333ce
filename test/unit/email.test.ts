import { expect } from "chai";
import { canonicalEmail, storedEmailSpellings } from "../../lib/email.js";

describe("canonicalEmail: one spelling per address", () => {
  it("puts every spelling of one address in one form: case, NFC and NFD, IDNA domains", () => {
    const nfc = "\u00e9mile@b\u00fccher.example";
    for (const spelling of [
      nfc,
      "e\u0301mile@bu\u0308cher.example",
      "\u00c9MILE@B\u00dcCHER.EXAMPLE",
      "\u00e9mile@xn--bcher-kva.example",
      "  \u00e9mile@XN--BCHER-KVA.example ",
      "\u00e9mile@b\u00fccher\uff0eexample",
    ]) {
      expect(canonicalEmail(spelling), JSON.stringify(spelling)).to.equal(nfc);
    }
    expect(canonicalEmail("Ada@Example.COM")).to.equal("ada@example.com");
    expect(canonicalEmail(`${"a".repeat(64)}@example.com`)).to.equal(`${"a".repeat(64)}@example.com`);
    expect(canonicalEmail("o'neil+{x}@sub.example-1.com")).to.equal("o'neil+{x}@sub.example-1.com");
    expect(canonicalEmail("ada@\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com")).to.equal("ada@example.com");
  });

  it("hostile: address lists, bad IDNA labels and non-addresses are refused", () => {
    for (const bad of [
      "victim@example.com,attacker@evil.test",
      "a@b@example.com",
      "ada@xn--zz.example",
      "ada@ex%61mple.com",
      "ada@example",
      "@example.com",
      "ada example@example.com",
      "ada@exa\u0000mple.com",
      `${"a".repeat(250)}@example.com`,
      `ada@${"b".repeat(2000)}.com`,
      ".ada@example.com",
      "ada.@example.com",
      "a..da@example.com",
      `${"a".repeat(65)}@example.com`,
      `${"\u00e9".repeat(33)}@example.com`,
      '"ada"@example.com',
      "ada@[127.0.0.1]",
      "ada@127.0.0.1",
      "ada@example.com.",
      "ada@-example.com",
      "ada@ex_ample.com",
      "ada\u200b@example.com",
      `a@${"b".repeat(63)}.${"c".repeat(63)}.${"d".repeat(63)}.${"e".repeat(60)}.com`,
    ]) {
      expect(canonicalEmail(bad), JSON.stringify(bad)).to.equal(undefined);
    }
  });
});

describe("storedEmailSpellings: how an address may have been stored", () => {
  it("lists the spellings of earlier versions, most exact first, for an address the current rule refuses too", () => {
    expect(storedEmailSpellings(" A..B@Example.COM ")).to.deep.equal(["a..b@example.com"]);
    expect(storedEmailSpellings("ada@xn--bcher-kva.de")).to.deep.equal(["ada@xn--bcher-kva.de", "ada@bücher.de"]);
    expect(storedEmailSpellings("Ada@BÜCHER.de")).to.deep.equal(["ada@bücher.de", "ada@xn--bcher-kva.de"]);
    expect(storedEmailSpellings("ada@x_y.com")).to.include("ada@x_y.com");
  });

  it("answers nothing for text that is not one bounded x@y", () => {
    for (const bad of ["", "nope", "@example.com", "ada@", `${"a".repeat(1100)}@example.com`, "a\u0000b@example.com", "a\nb@example.com"]) {
      expect(storedEmailSpellings(bad), JSON.stringify(bad)).to.deep.equal([]);
    }
  });
});
