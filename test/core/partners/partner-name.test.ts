import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, uniqueSlug, type TestStack } from "../../support/stack.js";
import { FINE_NAMES, HOSTILE_NAMES } from "../../support/names.js";
import { expectRefused } from "../../support/refusals.js";

/** A partner's name is printed by the CLI and read by operators: the text rules of every name people read. */
describe("PartnersService.CreatePartner: name text rules", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ webhookPollMs: 0 });
  });
  after(() => stack.close());

  const create = (name: string, slug = uniqueSlug()) => stack.admin.partners.createPartner({ name, slug });
  const rows = (slug: string) => stack.core.db("partners").where({ slug }).select("name");

  it("refuses control characters, line separators and bidi controls as INVALID_REQUEST naming the field, and makes no partner", async () => {
    for (const [name, why] of HOSTILE_NAMES.filter(([, why]) => !why.test("blank"))) {
      const slug = uniqueSlug();
      const refusal = await expectRefused(create(name, slug), Reason.INVALID_REQUEST);
      expect(refusal.message, JSON.stringify(name))
        .to.match(/\bname must not contain/)
        .and.to.match(why);
      expect(await rows(slug), JSON.stringify(name)).to.deep.equal([]);
    }
  });

  it("takes names in any script, right-to-left ones and emoji with joiners, stored trimmed", async () => {
    for (const name of FINE_NAMES) {
      const slug = uniqueSlug();
      const res = await create(name, slug);
      expect(res.partner!.name, JSON.stringify(name)).to.equal(name.trim());
      expect(await rows(slug)).to.deep.equal([{ name: name.trim() }]);
    }
  });

  it("counts characters, not UTF-16 units: 200 emoji are a name, 201 are not", async () => {
    const slug = uniqueSlug();
    expect((await create("🦊".repeat(200), slug)).partner!.name).to.equal("🦊".repeat(200));
    await expectRefused(create("🦊".repeat(201)), Reason.INVALID_REQUEST, /name must be 1 to 200 characters/);
    await expectRefused(create("   "), Reason.INVALID_REQUEST, /name must be 1 to 200 characters/);
  });
});
