import { expect } from "chai";
import { createDb, type Db } from "../../core/db/knex.js";
import { prepared } from "../../core/db/sql.js";
import { createScratchDatabase, requirePostgres } from "../support/db.js";
import { thrownBy } from "../support/refusals.js";

/**
 * Named prepared statements (core/db/sql.ts) on a real PostgreSQL connection: one pooled
 * connection, so the statement a call prepared is the one the next call finds.
 */
describe("prepared statements (PostgreSQL)", function () {
  this.timeout(60_000);
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  let db: Db;

  before(async function () {
    requirePostgres(this, "named prepared statements live on PostgreSQL connections; PGlite ignores the name");
    scratch = await createScratchDatabase();
    db = createDb({ url: scratch!.url, poolMax: 1 });
    await db.raw(`CREATE TABLE things (id integer PRIMARY KEY, label text NOT NULL)`);
    await db.raw(`INSERT INTO things VALUES (1, 'one'), (2, 'two')`);
  });
  after(async () => {
    await db?.destroy();
    await scratch?.drop();
  });

  it("prepares once per connection under a name that follows the text", async () => {
    const byId = prepared("thing", `SELECT id, label FROM things WHERE id = ?`);
    expect(await byId(db, [1])).to.deep.equal([{ id: 1, label: "one" }]);
    expect(await byId(db, [2])).to.deep.equal([{ id: 2, label: "two" }]);
    const { rows } = await db.raw(`SELECT name, statement FROM pg_prepared_statements WHERE name LIKE 'vg_thing_%'`);
    expect(rows).to.have.length(1);
    expect((rows as { statement: string }[])[0]!.statement).to.equal("SELECT id, label FROM things WHERE id = $1");
    // Another text is another statement, never a clash with the first name.
    const other = prepared("thing", `SELECT id, label FROM things WHERE label = ?`);
    expect(await other(db, ["two"])).to.deep.equal([{ id: 2, label: "two" }]);
    const after = await db.raw(`SELECT count(*)::int AS n FROM pg_prepared_statements WHERE name LIKE 'vg_thing_%'`);
    expect((after.rows as { n: number }[])[0]!.n).to.equal(2);
  });

  it("survives a column added under it: retried outside a transaction, the next call inside one succeeds", async () => {
    const all = prepared("all_things", `SELECT * FROM things ORDER BY id`);
    expect(await all(db, [])).to.deep.equal([
      { id: 1, label: "one" },
      { id: 2, label: "two" },
    ]);
    await db.raw(`ALTER TABLE things ADD COLUMN colour text NOT NULL DEFAULT 'red'`);
    // PostgreSQL refuses the prepared copy; the call is answered from a fresh statement.
    expect(await all(db, [])).to.deep.equal([
      { id: 1, label: "one", colour: "red" },
      { id: 2, label: "two", colour: "red" },
    ]);

    await db.raw(`ALTER TABLE things ADD COLUMN size integer NOT NULL DEFAULT 0`);
    expect(String(await thrownBy(db.transaction((trx) => all(trx, []))))).to.match(/cached plan must not change result type/);
    const rows = await db.transaction((trx) => all(trx, []));
    expect(rows[0]).to.deep.equal({ id: 1, label: "one", colour: "red", size: 0 });
  });
});
