import { expect } from "chai";
import { createExpiringMap } from "../../core/secrets/expiring-map.js";

describe("expiring map: bounded memory", () => {
  it("never holds more than its bound; the entry written longest ago goes first, reported with its expiry", () => {
    const evicted: [string, number, number][] = [];
    const map = createExpiringMap<number>(3, (key, value, until) => evicted.push([key, value, until]));
    for (let i = 0; i < 10; i++) {
      map.set(`id${i}`, i, 1000 + i);
      expect(map.size).to.be.at.most(3);
    }
    expect(evicted.map(([key]) => key)).to.deep.equal(["id0", "id1", "id2", "id3", "id4", "id5", "id6"]);
    expect(evicted[0]).to.deep.equal(["id0", 0, 1000]);
    expect([map.get("id6", 0), map.get("id7", 0), map.get("id9", 0)]).to.deep.equal([undefined, 7, 9]);
    // Writing an entry again makes it the newest.
    map.set("id7", 70, 2000);
    map.set("id10", 10, 2000);
    expect([map.get("id7", 0), map.get("id8", 0)]).to.deep.equal([70, undefined]);
  });
});
