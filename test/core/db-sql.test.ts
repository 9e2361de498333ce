import { expect } from "chai";
import { pgArray } from "../../core/db/sql.js";
import { testDatabase } from "../support/db.js";

describe("pgArray (core/db/sql.ts): array parameters of the batch statements", () => {
  it("round-trips through the database exactly: quotes, backslashes, commas, braces, NULL, empty, non-ASCII", async () => {
    const { db } = await testDatabase();
    const values = ["plain", 'q"uote', "back\\slash", "a,b", "{braces}", "NULL", "", " spaced ", "é✓", null];
    const { rows } = await db.raw(`SELECT ?::text[] AS a`, [pgArray(values)]);
    const got = rows[0].a;
    expect(Array.isArray(got) ? got : null, String(got)).to.deep.equal(values);
  });
});
