import { expect } from "chai";
import { uuidv7 } from "../../lib/uuidv7.js";
import { UUID } from "../../lib/uuid.js";
import { seedUuidv7 } from "../../bench/grown-data.bench.js";
import { testDatabase } from "../support/db.js";

describe("uuidv7: request and grant ids (UUID version 7)", () => {
  it("are UUIDs of version 7 and the RFC variant, carrying the time in milliseconds", () => {
    const at = Date.UTC(2026, 10, 23, 7, 0, 0, 123);
    for (let i = 0; i < 2000; i++) {
      const id = uuidv7(at);
      expect(id).to.match(UUID);
      expect(id[14]).to.equal("7");
      expect("89ab").to.include(id[19]!);
      expect(parseInt(id.slice(0, 8) + id.slice(9, 13), 16)).to.equal(at);
    }
  });

  it("sort in the order they were made, millisecond by millisecond", () => {
    const start = Date.now();
    const ids = Array.from({ length: 500 }, (_, i) => uuidv7(start + i));
    expect([...ids].sort()).to.deep.equal(ids);
  });

  it("are unique and spread over their random bits", () => {
    const ids = Array.from({ length: 100_000 }, () => uuidv7(1_700_000_000_000));
    expect(new Set(ids).size).to.equal(ids.length);
    // Every hex digit of the random tail turns up in every position.
    for (let pos = 24; pos < 36; pos++) expect(new Set(ids.slice(0, 2000).map((id) => id[pos])).size, `position ${pos}`).to.equal(16);
  });

  it("the grown-data bench's SQL makes them as this module does, so its seeded indexes grow like ours", async function () {
    // The first open of the test database migrates it, which takes longer than a unit test on a busy machine.
    this.timeout(180_000);
    const { db } = await testDatabase();
    const times = [Date.UTC(2026, 10, 23, 7, 0, 0, 123), Date.UTC(2024, 0, 1), 1_700_000_000_001];
    for (const at of times) {
      const { rows } = await db.raw(`SELECT ${seedUuidv7("?::timestamptz")} AS id FROM generate_series(1, 50)`, [new Date(at).toISOString()]);
      for (const { id } of rows as { id: string }[]) {
        expect(id).to.match(UUID);
        expect(id[14]).to.equal("7");
        expect("89ab").to.include(id[19]!);
        expect(id.slice(0, 15)).to.equal(uuidv7(at).slice(0, 15));
      }
    }
  });
});
