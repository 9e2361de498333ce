import { expect } from "chai";
import { markInexactNumbers } from "../../gateways/shared/json-numbers.js";

describe("numbers JSON.parse would change are marked, all others left as sent", () => {
  it("leaves exact numbers, strings and other JSON alone, returning the same text", () => {
    for (const text of [
      '{"a":5,"b":-12,"c":0,"d":-0,"e":1.5,"f":0.1,"g":5.0,"h":1e3,"i":2.5E-3,"j":9007199254740991,"k":-9007199254740991}',
      '["4.9999999999999999 in a string", "\\"9007199254740993\\"", true, false, null]',
      '{"big":123456789012345}',
    ]) {
      expect(markInexactNumbers(text)).to.equal(text);
    }
  });

  it("marks what would round or overflow, wherever it sits", () => {
    expect(markInexactNumbers('{"amount":4.9999999999999999}')).to.equal('{"amount":{"inexact_number":"4.9999999999999999"}}');
    expect(markInexactNumbers("[9007199254740993, 5.0000000000000001, 1e400, -1e400]")).to.equal(
      '[{"inexact_number":"9007199254740993"}, {"inexact_number":"5.0000000000000001"}, {"inexact_number":"1e400"}, {"inexact_number":"-1e400"}]',
    );
    expect(markInexactNumbers('{"s":"x\\"y","n":123456789012345678901234567890}')).to.equal(
      '{"s":"x\\"y","n":{"inexact_number":"123456789012345678901234567890"}}',
    );
  });

  it("keeps the JSON valid, so parsing then refuses the marked value where a number belongs", () => {
    const parsed = JSON.parse(markInexactNumbers('{"jsonrpc":"2.0","id":9007199254740993,"params":{"amount_cents":4.9999999999999999}}'));
    expect(parsed.id).to.deep.equal({ inexact_number: "9007199254740993" });
    expect(parsed.params.amount_cents).to.deep.equal({ inexact_number: "4.9999999999999999" });
  });

  it("reads every body in one pass: an unterminated string of escaped quotes is left as it is", function () {
    // A string match that could fail restarted at each quote: over a second for 64 KiB, far over
    // the limit here for 512 KiB; one pass takes milliseconds.
    this.timeout(5_000);
    const hostile = `"${'\\"'.repeat(1 << 18)}`;
    expect(markInexactNumbers(hostile)).to.equal(hostile);
    const backslashes = `["${"\\".repeat(1 << 20)}", 9007199254740993]`;
    expect(markInexactNumbers(backslashes).endsWith('{"inexact_number":"9007199254740993"}]')).to.equal(true);
  });

  it("compares a long numeral in one pass: zero runs inside it cost no backtracking", function () {
    // Trimming trailing zeros with /0+$/ rescanned each run: about 5 s for one 64 KiB numeral.
    this.timeout(5_000);
    const numeral = `1${"0".repeat(1 << 16)}1`;
    expect(markInexactNumbers(`[${numeral}]`)).to.equal(`[{"inexact_number":"${numeral}"}]`);
  });

  it("marks a number at either end of the text and leaves invalid JSON for the parser to refuse", () => {
    expect(markInexactNumbers("9007199254740993")).to.equal('{"inexact_number":"9007199254740993"}');
    expect(markInexactNumbers('{"a": -')).to.equal('{"a": -');
    expect(markInexactNumbers('{"a":"unterminated 9007199254740993')).to.equal('{"a":"unterminated 9007199254740993');
  });
});
