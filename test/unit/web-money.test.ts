import { expect } from "chai";
import { money } from "../../gateways/web/format.js";

/** The pages' money formatter: exact cents from whole numbers of any size, in each currency the pages pass. */
describe("web money()", () => {
  const NBSP = "\u00a0";

  it("formats whole cents exactly, with grouping and two-digit cents", () => {
    const cases: [bigint, string][] = [
      [0n, "$0.00"],
      [5n, "$0.05"],
      [100n, "$1.00"],
      [123456n, "$1,234.56"],
      [9007199254740991n, "$90,071,992,547,409.91"],
      [-5n, "-$0.05"],
      [-123456n, "-$1,234.56"],
      [-9007199254740991n, "-$90,071,992,547,409.91"],
    ];
    for (const [cents, words] of cases) expect(money(cents, "USD"), String(cents)).to.equal(words);
  });

  it("takes a number or a string of digits as well as a bigint, and refuses anything it would have to round", () => {
    for (const cents of [9007199254740991n, 9007199254740991, "9007199254740991"]) {
      expect(money(cents, "USD"), typeof cents).to.equal("$90,071,992,547,409.91");
    }
    expect(money(-123456, "USD")).to.equal("-$1,234.56");
    expect(money("-5", "USD")).to.equal("-$0.05");
    // Past 2^53 a string or bigint is still exact.
    expect(money("12345678901234567890", "USD")).to.equal("$123,456,789,012,345,678.90");
    for (const bad of [1.5, Number.NaN, 2 ** 53, "1.5", "", "1e3", " 12"]) {
      expect(() => money(bad, "USD"), String(bad)).to.throw(RangeError);
    }
  });

  it("uses the currency the pages pass: USD, EUR, none (USD), a code Intl shows by name, and one it refuses", () => {
    expect(money(9007199254740991n, "EUR")).to.equal("€90,071,992,547,409.91");
    expect(money(-5n, "EUR")).to.equal("-€0.05");
    expect(money(123456n, "")).to.equal("$1,234.56");
    expect(money(123456n, "XYZ")).to.equal(`XYZ${NBSP}1,234.56`);
    // Cents are hundredths whatever the currency's usual minor unit.
    expect(money(12345n, "JPY")).to.equal("¥123.45");
    expect(money(-123456n, "us")).to.equal("-1234.56 us");
    expect(money(5n, "us")).to.equal("0.05 us");
  });
});
