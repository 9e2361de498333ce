import { expect } from "chai";
import { createCoalescer } from "../../core/db/coalesce.js";

/** A load whose statements the test finishes by hand, recording the keys of each. */
function manualLoad() {
  const statements: { keys: string[]; finish(rows?: Record<string, number>): void; fail(err: Error): void }[] = [];
  const load = (keys: string[]) =>
    new Promise<Map<string, number>>((resolve, reject) => {
      statements.push({ keys, finish: (rows = {}) => resolve(new Map(Object.entries(rows))), fail: reject });
    });
  return { statements, load };
}

const turn = () => new Promise<void>((r) => setImmediate(r));

describe("createCoalescer (concurrent point reads share a statement)", () => {
  it("reads asked in one turn share one statement, each key once; a key without a row is undefined", async () => {
    const { statements, load } = manualLoad();
    const read = createCoalescer(load);
    const reads = [read("a"), read("b"), read("a"), read("c")];
    await turn();
    expect(statements.map((s) => s.keys)).to.deep.equal([["a", "b", "c"]]);
    statements[0]!.finish({ a: 1, b: 2 });
    expect(await Promise.all(reads)).to.deep.equal([1, 2, 1, undefined]);
  });

  it("a read is never answered by a statement that started before it was asked (fresh reads)", async () => {
    const { statements, load } = manualLoad();
    const read = createCoalescer(load, { maxInFlight: 1 });
    const first = read("g");
    await turn();
    expect(statements).to.have.length(1);
    // Asked while the first statement is in flight (say, just after a revocation committed).
    const second = read("g");
    const third = read("h");
    await turn();
    expect(statements).to.have.length(1);
    statements[0]!.finish({ g: 1 });
    expect(await first).to.equal(1);
    await turn();
    expect(statements.map((s) => s.keys)).to.deep.equal([["g"], ["g", "h"]]);
    statements[1]!.finish({ g: 2, h: 3 });
    expect([await second, await third]).to.deep.equal([2, 3]);
  });

  it("runs at most maxInFlight statements, each of at most maxBatch keys", async () => {
    const { statements, load } = manualLoad();
    const read = createCoalescer(load, { maxInFlight: 2, maxBatch: 2 });
    const reads = ["a", "b", "c", "d", "e"].map((k) => read(k));
    await turn();
    expect(statements.map((s) => s.keys)).to.deep.equal([["a", "b"], ["c", "d"]]);
    statements[1]!.finish({ c: 3, d: 4 });
    await turn();
    expect(statements.map((s) => s.keys)).to.deep.equal([["a", "b"], ["c", "d"], ["e"]]);
    statements[0]!.finish({ a: 1, b: 2 });
    statements[2]!.finish({ e: 5 });
    expect(await Promise.all(reads)).to.deep.equal([1, 2, 3, 4, 5]);
  });

  it("a failed statement fails every read it carried, and only those", async () => {
    const { statements, load } = manualLoad();
    const read = createCoalescer(load, { maxInFlight: 1 });
    const carried = [read("a"), read("b")].map((p) => p.then(() => "ok", (err: Error) => err.message));
    await turn();
    const later = read("a");
    statements[0]!.fail(new Error("connection lost"));
    expect(await Promise.all(carried)).to.deep.equal(["connection lost", "connection lost"]);
    await turn();
    statements[1]!.finish({ a: 7 });
    expect(await later).to.equal(7);
  });
});
