import { expect } from "chai";
import { createDb, type Db } from "../../core/db/knex.js";
import { thrownBy } from "../support/refusals.js";

/**
 * The embedded database has one connection: a parameter its driver cannot encode must fail
 * that statement alone, never the protocol state every later request shares.
 */
describe("embedded database: a parameter it cannot encode", () => {
  let db: Db;
  before(async () => {
    db = createDb({});
    await db.raw("CREATE TABLE tagged (id int PRIMARY KEY, tags text[] NOT NULL)");
  });
  after(() => db.destroy());

  const bad = [5, true] as unknown as string[];
  for (const value of bad) {
    it(`a ${typeof value} for a text[] column fails its transaction, which rolls back; the next one works`, async () => {
      const err = (await thrownBy(
        db.transaction(async (trx) => {
          await trx("tagged").insert({ id: 1, tags: ["kept?"] });
          await trx("tagged").insert({ id: 2, tags: value });
        }),
      )) as Error;
      expect(err.message).to.include("cannot be encoded");
      const n = await db.transaction(async (trx) => {
        await trx("tagged").insert({ id: 3, tags: ["next"] });
        return Number((await trx("tagged").count("* as n"))[0]!.n);
      });
      expect(n).to.equal(1);
      await db("tagged").del();
    });

    it(`a ${typeof value} outside a transaction fails that statement; the next statement runs with its own values`, async () => {
      await thrownBy(db("tagged").insert({ id: 4, tags: value }));
      await db("tagged").insert({ id: 5, tags: ["five", "5"] });
      expect(await db("tagged").select("id", "tags")).to.deep.equal([{ id: 5, tags: ["five", "5"] }]);
      await db("tagged").del();
    });
  }

  it("array elements are still encoded as before: numbers in a text[] become text", async () => {
    await db("tagged").insert({ id: 6, tags: [1, 2] as unknown as string[] });
    expect(await db("tagged").where({ id: 6 }).first("tags")).to.deep.equal({ tags: ["1", "2"] });
  });
});
