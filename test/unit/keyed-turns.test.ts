import { expect } from "chai";
import { createKeyedTurns } from "../../core/partners/keyed-turns.js";

const refuse = (): never => {
  throw new Error("refused");
};
const tick = () => new Promise((resolve) => setImmediate(resolve));
const rejection = (p: Promise<unknown>) => p.then(() => "resolved", (err: Error) => err.message);

describe("keyed turns (one secret-check reservation per client address at a time)", () => {
  it("runs one key's work one at a time, in arrival order", async () => {
    const turns = createKeyedTurns(10, refuse);
    const log: string[] = [];
    let running = 0;
    const job = (name: string) =>
      turns.run("10.0.0.1", async () => {
        running++;
        expect(running).to.equal(1);
        log.push(`start ${name}`);
        await tick();
        log.push(`end ${name}`);
        running--;
        return name;
      });
    expect(await Promise.all([job("a"), job("b"), job("c")])).to.deep.equal(["a", "b", "c"]);
    expect(log).to.deep.equal(["start a", "end a", "start b", "end b", "start c", "end c"]);
  });

  it("lets different keys run at the same time, and a failed turn pass the next", async () => {
    const turns = createKeyedTurns(10, refuse);
    let concurrent = 0;
    let peak = 0;
    const job = (key: string) =>
      turns.run(key, async () => {
        peak = Math.max(peak, ++concurrent);
        await tick();
        concurrent--;
      });
    await Promise.all([job("a"), job("b"), job("c")]);
    expect(peak).to.equal(3);
    const failed = turns.run("a", async () => {
      throw new Error("boom");
    });
    const next = turns.run("a", async () => "next");
    expect(await rejection(failed)).to.equal("boom");
    expect(await next).to.equal("next");
  });

  it("refuses at once when a key already has maxWaiting callers waiting", async () => {
    const turns = createKeyedTurns(2, refuse);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const first = turns.run("k", () => gate);
    const waiting = [turns.run("k", async () => 1), turns.run("k", async () => 2)];
    expect(await rejection(turns.run("k", async () => 3))).to.equal("refused");
    // Another key is not affected.
    expect(await turns.run("other", async () => "ok")).to.equal("ok");
    release();
    await first;
    expect(await Promise.all(waiting)).to.deep.equal([1, 2]);
    // Once the line is empty the key starts afresh.
    expect(await Promise.all([turns.run("k", async () => 4), turns.run("k", async () => 5), turns.run("k", async () => 6)])).to.deep.equal([4, 5, 6]);
  });
});
