import { expect } from "chai";
import { createGroupCommit } from "../../core/db/group-commit.js";

const turn = () => new Promise<void>((r) => setImmediate(r));

/**
 * Token verification and payments.simulate read grant state through createGroupCommit;
 * a revocation must refuse the next call at once, so a read may never be answered by a
 * statement that started before it was asked.
 */
describe("batched reads stay fresh (createGroupCommit as used by VerifyAgentToken and SimulatePayment)", () => {
  it("a read asked while a statement is in flight leaves with a later statement", async () => {
    const statements: { keys: string[]; finish(values: number[]): void }[] = [];
    const read = createGroupCommit((keys: string[]) => new Promise<number[]>((resolve) => statements.push({ keys, finish: resolve })), {
      maxBatch: 256,
      maxInFlight: 1,
    });
    const first = read("grant");
    await turn();
    expect(statements.map((s) => s.keys)).to.deep.equal([["grant"]]);
    // Asked after, say, a revocation committed while the first statement ran.
    const second = read("grant");
    const third = read("other");
    await turn();
    expect(statements).to.have.length(1);
    statements[0]!.finish([1]);
    expect(await first).to.equal(1);
    await turn();
    expect(statements.map((s) => s.keys)).to.deep.equal([["grant"], ["grant", "other"]]);
    statements[1]!.finish([2, 3]);
    expect([await second, await third]).to.deep.equal([2, 3]);
  });
});
