import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api } from "../../support/resources.js";
import { createJar, formFields } from "../../support/agent-oauth.js";
import { expectHttpError, expectRefused } from "../../support/refusals.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";

/**
 * One address rule for every surface that takes an e-mail (partner pre-create, operator user
 * create, sign-in): RFC 5321 lengths in octets, one @, a dot-atom local part, a domain of LDH labels.
 */
describe("e-mail addresses: the strict rule on every surface", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let token: string;
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    token = await mintPartnerToken(stack, await createPartner(stack));
  });
  after(() => stack?.close());

  const tag = () => randomBytes(4).toString("hex");
  const bad = (t: string) => [
    `.lead-${t}@example.com`,
    `trail-${t}.@example.com`,
    `two..dots-${t}@example.com`,
    `${t}${"a".repeat(57)}@example.com`,
    `${t}-${"\u00e9".repeat(30)}@example.com`,
    `"quoted-${t}"@example.com`,
    `ip-${t}@[127.0.0.1]`,
    `ip-${t}@127.0.0.1`,
    `dot-${t}@.example.com`,
    `dot-${t}@example..com`,
    `dot-${t}@example.com.`,
    `hyphen-${t}@-example.com`,
    `hyphen-${t}@example-.com`,
    `under-${t}@ex_ample.com`,
    `zw-${t}\u200b@example.com`,
    `bidi-${t}\u202e@example.com`,
    `a-${t}@${"b".repeat(63)}.${"c".repeat(63)}.${"d".repeat(63)}.${"e".repeat(50)}.com`,
    `two-${t}@at@example.com`,
    `space ${t}@example.com`,
  ];

  it("POST /users refuses each address outside the rule with 400 invalid_request and creates no user", async () => {
    const t = tag();
    for (const email of bad(t)) {
      const res = await api(stack, "POST", "/users", { token, json: { email } });
      expectHttpError(res, 400, "invalid_request");
      expect((res.body as { error: { message: string } }).error.message, email).to.match(/^email /);
    }
    const { rows } = await stack.core.db.raw(`SELECT email FROM users WHERE email LIKE ?`, [`%${t}%`]);
    expect(rows).to.deep.equal([]);
  });

  it("POST /users takes the addresses at the rule's edges", async () => {
    const t = tag();
    const good = [
      `${t}${"a".repeat(56)}@example.com`,
      `first.last+${t}@example.com`,
      `!#$%&'*+/=?^_\`{|}~-${t}@example.com`,
      `z\u00f6e-${t}@b\u00fccher.example`,
      `${t}@${"b".repeat(63)}.${"c".repeat(63)}.${"d".repeat(63)}.${"e".repeat(40)}.com`,
      `a-${t}@x-y.example`,
      `a-${t}@xn--bcher-kva.example`,
    ];
    for (const email of good) {
      const res = await api(stack, "POST", "/users", { token, json: { email } });
      expect(res.status, `${email}: ${res.text}`).to.equal(201);
    }
  });

  it("the operator's user create refuses the same addresses", async () => {
    for (const email of bad(tag())) {
      await expectRefused(stack.admin.partners.createUser({ email }), Reason.INVALID_REQUEST, /e-mail address/);
    }
  });

  it("sign-in refuses the same addresses with the form's message, sending nothing", async () => {
    for (const email of bad(tag()).slice(0, 6)) {
      const jar = createJar(stack.url);
      const fields = formFields(await (await jar.get("/signin")).text(), "/signin");
      const sent = await jar.post("/signin", { ...fields, email });
      expect(sent.status, email).to.equal(400);
      expect(await sent.text()).to.include("Enter a valid e-mail address.");
    }
  });
});
