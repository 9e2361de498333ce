import { Code, ConnectError } from "@connectrpc/connect";
import { expect } from "chai";
import { createGroupCommit } from "../../core/db/group-commit.js";
import { thrownBy } from "../support/refusals.js";

describe("group commit (core/db/group-commit.ts)", () => {
  it("sends the items of one event-loop turn together and answers each caller with its own result", async () => {
    const batches: number[][] = [];
    const submit = createGroupCommit<number, number>(
      async (items) => {
        batches.push(items);
        return items.map((i) => i * 10);
      },
      { maxBatch: 100, maxInFlight: 2 },
    );
    const results = await Promise.all([1, 2, 3, 4, 5].map(submit));
    expect(results).to.deep.equal([10, 20, 30, 40, 50]);
    expect(batches).to.deep.equal([[1, 2, 3, 4, 5]]);
  });

  it("keeps at most maxInFlight batches running and at most maxBatch items in one; the rest leave as batches return", async () => {
    let running = 0;
    let peak = 0;
    const sizes: number[] = [];
    const submit = createGroupCommit<number, number>(
      async (items) => {
        running++;
        peak = Math.max(peak, running);
        sizes.push(items.length);
        await new Promise((r) => setTimeout(r, 5));
        running--;
        return items;
      },
      { maxBatch: 3, maxInFlight: 2 },
    );
    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => submit(i)));
    expect(results).to.deep.equal(Array.from({ length: 10 }, (_, i) => i));
    expect(peak).to.equal(2);
    expect(Math.max(...sizes)).to.equal(3);
    expect(sizes.reduce((a, b) => a + b, 0)).to.equal(10);
  });

  it("retries a failed batch item by item, so only the item the database refuses fails", async () => {
    const calls: number[][] = [];
    const submit = createGroupCommit<number, number>(
      async (items) => {
        calls.push(items);
        if (items.includes(3)) throw new Error("refused");
        return items;
      },
      { maxBatch: 100, maxInFlight: 1 },
    );
    const settled = await Promise.allSettled([1, 2, 3, 4].map(submit));
    expect(settled.map((s) => s.status)).to.deep.equal(["fulfilled", "fulfilled", "rejected", "fulfilled"]);
    expect(calls[0]).to.deep.equal([1, 2, 3, 4]);
    expect(calls.slice(1).map((c) => c.length)).to.deep.equal([1, 1, 1, 1]);
  });

  it("with lockKey, items whose key a running batch holds wait for the next batch; other keys run beside it", async () => {
    const batches: string[][] = [];
    let release!: () => void;
    const first = new Promise<void>((r) => (release = r));
    const submit = createGroupCommit<string, string>(
      async (items) => {
        batches.push(items);
        if (batches.length === 1) await first;
        return items;
      },
      { maxBatch: 100, maxInFlight: 2, lockKey: (item) => item.split(":")[0]! },
    );
    const a = [submit("a:1"), submit("a:2")];
    await new Promise((r) => setImmediate(r));
    const later = [submit("a:3"), submit("b:1"), submit("a:4")];
    await later[1];
    expect(batches).to.deep.equal([["a:1", "a:2"], ["b:1"]]);
    release();
    expect(await Promise.all([...a, ...later])).to.deep.equal(["a:1", "a:2", "a:3", "b:1", "a:4"]);
    expect(batches.slice(2)).to.deep.equal([["a:3", "a:4"]]);
  });

  it("withdraws an item whose caller's deadline passes before a batch takes it; an item already in a batch is written", async () => {
    const batches: string[][] = [];
    let release!: () => void;
    const first = new Promise<void>((r) => (release = r));
    const submit = createGroupCommit<{ name: string; signal?: AbortSignal }, string>(
      async (items) => {
        batches.push(items.map((i) => i.name));
        if (batches.length === 1) await first;
        return items.map((i) => i.name);
      },
      { maxBatch: 100, maxInFlight: 1, signalOf: (i) => i.signal },
    );
    const deadline = () => new ConnectError("the operation timed out", Code.DeadlineExceeded);
    const running = new AbortController();
    const a = submit({ name: "a", signal: running.signal });
    await new Promise((r) => setImmediate(r));
    // "b" waits behind the running batch (maxInFlight 1); its deadline passes there.
    const waiting = new AbortController();
    const b = submit({ name: "b", signal: waiting.signal });
    const c = submit({ name: "c" });
    waiting.abort(deadline());
    running.abort(deadline());
    const err = (await thrownBy(b)) as ConnectError;
    expect(err).to.be.instanceOf(ConnectError);
    expect(Code[err.code]).to.equal("DeadlineExceeded");
    // A deadline already spent never enters the queue.
    expect(Code[((await thrownBy(submit({ name: "d", signal: AbortSignal.abort(deadline()) }))) as ConnectError).code]).to.equal("DeadlineExceeded");
    release();
    expect(await Promise.all([a, c])).to.deep.equal(["a", "c"]);
    expect(batches).to.deep.equal([["a"], ["c"]]);
  });
});
