import { expect } from "chai";
import { pool, randomBase64url, take } from "../../lib/random.js";

describe("random: pooled CSPRNG bytes for tokens, salts and ids", () => {
  it("gives base64url strings of the asked length, never the same one twice across refills", () => {
    // 4 KiB a refill: 20,000 tokens of 32 bytes go through some 150 refills.
    const seen = new Set<string>();
    for (let i = 0; i < 20_000; i++) {
      const t = randomBase64url(32);
      expect(t).to.match(/^[A-Za-z0-9_-]{43}$/);
      seen.add(t);
    }
    expect(seen.size).to.equal(20_000);
  });

  it("hands every byte out once: consecutive slices never overlap, even where a slice would cross the pool's end", () => {
    let next = 0;
    let refills = 0;
    for (let i = 0; i < 3000; i++) {
      const n = 1 + (i % 37);
      const at = take(n);
      expect(at + n).to.be.at.most(pool.length);
      if (i > 0 && at !== next) {
        // Only a slice that would not fit starts a fresh pool.
        expect(at).to.equal(0);
        expect(next + n).to.be.greaterThan(pool.length);
        refills++;
      }
      next = at + n;
    }
    expect(refills).to.be.greaterThan(0);
  });

  it("spreads its bytes over every value", () => {
    const counts = new Array<number>(256).fill(0);
    for (let i = 0; i < 400; i++) {
      const at = take(64);
      for (let j = at; j < at + 64; j++) counts[pool[j]!]!++;
    }
    // 25,600 bytes: every value turns up (about 100 times each).
    expect(
      counts.every((c) => c > 40 && c < 200),
      JSON.stringify(counts),
    ).to.equal(true);
  });

  it("refuses sizes outside 1-256 bytes", () => {
    expect(() => take(0)).to.throw(RangeError);
    expect(() => take(257)).to.throw(RangeError);
  });
});
