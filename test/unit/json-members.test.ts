import { expect } from "chai";
import { repeatedMember, repeatedMemberMessage } from "../../gateways/shared/json-members.js";

describe("repeatedMember (gateways/shared/json-members.ts)", () => {
  it("finds a name repeated in one object, at any depth, escapes decoded", () => {
    expect(repeatedMember(`{"amount_cents":1,"amount_cents":100000}`)).to.equal("amount_cents");
    expect(repeatedMember(`{"items":[{"a":1},{"b":2,"b" :3}]}`)).to.equal("b");
    expect(repeatedMember(`{"a":1,"\\u0061":2}`)).to.equal("a");
    expect(repeatedMember(`{"x":{"a":1},"y":{"a":1},"a":{"x":1}}`)).to.equal(undefined);
  });

  it("does not take values, array strings or names in sibling objects for repeats", () => {
    expect(repeatedMember(`{"a":"a","b":["a","a"],"c":"x:y","d":"\\":"}`)).to.equal(undefined);
    expect(repeatedMember(`[{"id":1,"method":"m"},{"id":2,"method":"m"}]`)).to.equal(undefined);
    expect(repeatedMember(`"plain"`)).to.equal(undefined);
    expect(repeatedMember(`{"a\\"":1,"a":2}`)).to.equal(undefined);
  });

  it("names the member, quoted and cut short", () => {
    expect(repeatedMemberMessage("amount_cents")).to.equal(`member "amount_cents" appears twice in one object`);
    expect(repeatedMemberMessage("\u001b[2J")).to.equal(`member "\\u001b[2J" appears twice in one object`);
    expect(repeatedMemberMessage("n".repeat(500))).to.have.length.below(120);
  });
});
