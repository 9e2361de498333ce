import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { startStack, type TestStack } from "../support/stack.js";

/**
 * A failed statement logs no value it was bound to: not in the message, the driver's `detail`
 * or PostgreSQL's own quoting. Through a real RPC whose INSERT the database refuses.
 */
describe("failed statements log no bound values", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
    // The database refuses these addresses the way a constraint or a cast would, naming the value.
    await stack.core.db.raw(`
      CREATE OR REPLACE FUNCTION test_refuse_leaky_email() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF NEW.email LIKE 'leak-detail-%' THEN
          RAISE EXCEPTION 'new row violates check constraint "users_email_check"' USING ERRCODE = '23514', DETAIL = format('Failing row contains (%s).', NEW.email);
        ELSIF NEW.email LIKE 'leak-message-%' THEN
          RAISE EXCEPTION 'invalid input syntax for type uuid: "%"', NEW.email USING ERRCODE = '22P02';
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

  for (const kind of ["detail", "message"]) {
    it(`a value the database names in its ${kind} does not reach the log`, async () => {
      const secret = `s3cr3t${randomBytes(8).toString("hex")}`;
      const email = `leak-${kind}-${secret}@example.com`;
      const before = stack.logs.lines.length;
      const err = await stack.admin.partners.createUser({ email }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, "the RPC fails").to.be.instanceOf(Error);
      const lines = stack.logs.lines.slice(before).join("");
      // The failure is logged, with the statement's SQL (placeholders only)...
      expect(lines).to.include("rpc error");
      expect(lines).to.include("INSERT INTO users");
      // ...and nothing of the value.
      expect(lines).to.not.include(secret);
    });
  }
});
