import { readdirSync, readFileSync } from "node:fs";
import { expect } from "chai";
import { ConnectError } from "@connectrpc/connect";
import { createSecretHasher } from "../../core/partners/credentials.js";
import { errorDetailOf } from "../../core/errors.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";

const params = { N: 1024, r: 8, p: 1 };

async function overloaded(promise: Promise<unknown>) {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).to.be.instanceOf(ConnectError);
  const detail = errorDetailOf(err)!;
  expect(detail.reason).to.equal(Reason.OVERLOADED);
  expect(detail.retryAfterSeconds).to.be.within(1, 30);
}

describe("secret checks: bounded queue, shedding and the priority lane", () => {
  it("sheds at once with OVERLOADED and a Retry-After hint when the lane is full", async () => {
    const hasher = await createSecretHasher({ params, maxConcurrent: 1, maxQueue: 2, maxWaitMs: 60_000 });
    const stored = await hasher.hash("s3cret");
    const running = [hasher.verify("wrong", stored), hasher.verify("wrong", stored), hasher.verify("wrong", stored)];
    expect(hasher.load()).to.deep.equal({ active: 1, queued: 2, priorityQueued: 0 });
    await overloaded(hasher.verify("wrong", stored));
    expect(await Promise.all(running)).to.deep.equal([false, false, false]);
    expect(hasher.load()).to.deep.equal({ active: 0, queued: 0, priorityQueued: 0 });
  });

  it("serves the priority lane before queued anonymous checks, even when the normal lane is full", async () => {
    const hasher = await createSecretHasher({ params, maxConcurrent: 1, maxQueue: 2, maxWaitMs: 60_000 });
    const stored = await hasher.hash("s3cret");
    const order: string[] = [];
    const track = (name: string, p: Promise<boolean>) => p.then((ok) => (order.push(name), ok));
    const all = [
      track("first", hasher.verify("wrong", stored)),
      track("normal-1", hasher.verify("wrong", stored)),
      track("normal-2", hasher.verify("wrong", stored)),
    ];
    await overloaded(hasher.verify("wrong", stored));
    all.push(track("priority", hasher.verify("s3cret", stored, "priority")));
    expect(await Promise.all(all)).to.deep.equal([false, false, false, true]);
    expect(order).to.deep.equal(["first", "priority", "normal-1", "normal-2"]);
  });

  it("sheds a check whose expected wait exceeds maxWaitMs, without queueing it", async () => {
    const hasher = await createSecretHasher({ params, maxConcurrent: 1, maxQueue: 100, maxWaitMs: 1 });
    const stored = await hasher.hash("s3cret");
    const first = hasher.verify("s3cret", stored);
    await overloaded(hasher.verify("s3cret", stored));
    expect(hasher.load().queued).to.equal(0);
    expect(await first).to.equal(true);
  });
});

describe("secret checks: derivations at the lowest CPU priority", () => {
  /** Nice value of each thread of this process, from /proc (Linux, where CI and the service run). */
  const threadNices = () =>
    readdirSync("/proc/self/task").map((tid) => {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
      // Fields after the command (which may hold spaces): state is field 3, nice field 19.
      return Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[16]);
    });

  it("runs every derivation on its own threads at nice 19 and leaves the serving threads alone", async () => {
    const before = threadNices();
    const hasher = await createSecretHasher({ params, maxConcurrent: 2 });
    try {
      expect(await hasher.lowPriority()).to.equal(true);
      const stored = await hasher.hash("s3cret");
      expect(await Promise.all([hasher.verify("s3cret", stored), hasher.verify("wrong", stored)])).to.deep.equal([true, false]);
      const after = threadNices();
      expect(after.filter((n) => n === 19).length - before.filter((n) => n === 19).length).to.equal(2);
      // This thread (the event loop that serves requests) keeps its priority.
      const self = readFileSync("/proc/thread-self/stat", "utf8");
      expect(Number(self.slice(self.lastIndexOf(")") + 2).split(" ")[16])).to.equal(0);
    } finally {
      await hasher.close();
    }
  });
});
