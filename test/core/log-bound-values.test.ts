import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { startStack, type TestStack } from "../support/stack.js";
import { createPartner, mintPartnerToken } from "../support/partners.js";
import { expectInternalError } from "../support/refusals.js";

/**
 * A failed statement logs no value it was bound to: not in the message, the driver's `detail`
 * or any of PostgreSQL's quoting, in core's line or the gateway's. Through real calls whose INSERT the database refuses.
 */
describe("failed statements log no bound values", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
    // The database refuses these addresses the way a constraint or a cast would, naming the value.
    await stack.core.db.raw(`
      CREATE OR REPLACE FUNCTION test_refuse_leaky_email() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.email LIKE 'leak-detail-%' THEN
          RAISE EXCEPTION 'new row violates check constraint "users_email_check"' USING ERRCODE = '23514', DETAIL = format('Failing row contains (%s).', NEW.email);
        ELSIF NEW.email LIKE 'leak-message-%' THEN
          RAISE EXCEPTION 'invalid input syntax for type uuid: "%"', NEW.email USING ERRCODE = '22P02';
        ELSIF NEW.email LIKE 'leak-range-%' THEN
          RAISE EXCEPTION 'value "%" is out of range for type integer', NEW.email USING ERRCODE = '22003';
        END IF;
        RETURN NEW;
      END $$`);
    await stack.core.db.raw(`CREATE TRIGGER test_refuse_leaky_email BEFORE INSERT ON users FOR EACH ROW EXECUTE FUNCTION test_refuse_leaky_email()`);
  });
  after(async () => {
    await stack.core.db.raw(`DROP TRIGGER IF EXISTS test_refuse_leaky_email ON users`);
    await stack.core.db.raw(`DROP FUNCTION IF EXISTS test_refuse_leaky_email()`);
    await stack.close();
  });

  const leaky = (kind: string) => {
    const secret = `s3cr3t${randomBytes(8).toString("hex")}`;
    return { secret, email: `leak-${kind}-${secret}@example.com` };
  };

  for (const kind of ["detail", "message", "range"]) {
    it(`a value the database names in its ${kind} does not reach core's log`, async () => {
      const { secret, email } = leaky(kind);
      const before = stack.logs.lines.length;
      await expectInternalError(stack.admin.partners.createUser({ email }));
      const lines = stack.logs.lines.slice(before).join("");
      // The failure is logged, with the statement's SQL (placeholders only)...
      expect(lines).to.include("rpc error");
      expect(lines).to.include("INSERT INTO users");
      // ...and nothing of the value.
      expect(lines).to.not.include(secret);
    });
  }

  it("nor the gateway's line for the same failure, nor the partner's answer", async () => {
    const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
    const token = await mintPartnerToken(stack, partner, "kyc:read");
    for (const kind of ["detail", "message", "range"]) {
      const { secret, email } = leaky(kind);
      const before = stack.logs.lines.length;
      const res = await fetch(`${stack.url}/api/partner/users`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${token}` },
        body: JSON.stringify({ email }),
      });
      expect(res.status, kind).to.equal(500);
      expect(await res.text(), kind).to.not.include(secret);
      const lines = stack.logs.lines.slice(before).join("");
      expect(lines, kind).to.include("partner resource failure");
      expect(lines, kind).to.not.include(secret);
      // The gateway gets what a network client would, not core's cause: core alone logs the statement.
      const gatewayLine = stack.logs.lines.slice(before).find((l) => l.includes("partner resource failure"))!;
      expect(gatewayLine, kind).to.not.include("INSERT INTO users");
      expect(lines, kind).to.include("INSERT INTO users");
    }
  });
});
