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
  /** Nice value and scheduling policy of each thread of this process, from /proc (Linux, where CI and the service run). */
  const threads = () =>
    readdirSync("/proc/self/task").map((tid) => {
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
      // Fields after the command (which may hold spaces): state is field 3, nice field 19, policy field 41.
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      return { nice: Number(f[16]), policy: Number(f[38]) };
    });
  const SCHED_OTHER = 0;
  const SCHED_IDLE = 5;
  const lowest = (t: { nice: number; policy: number }) => t.nice === 19 && t.policy === SCHED_IDLE;

  it("runs every derivation on its own threads at nice 19 under SCHED_IDLE and leaves the serving threads alone", async () => {
    const before = threads();
    const hasher = await createSecretHasher({ params, maxConcurrent: 2 });
    try {
      const stored = await hasher.hash("s3cret");
      expect(await Promise.all([hasher.verify("s3cret", stored), hasher.verify("wrong", stored)])).to.deep.equal([true, false]);
      expect(await hasher.priority()).to.deep.equal({ niced: true, idle: true });
      const after = threads();
      expect(after.filter(lowest).length - before.filter(lowest).length).to.equal(2);
      // This thread (the event loop that serves requests) keeps its priority and policy.
      const self = readFileSync("/proc/thread-self/stat", "utf8");
      const f = self.slice(self.lastIndexOf(")") + 2).split(" ");
      expect({ nice: Number(f[16]), policy: Number(f[38]) }).to.deep.equal({ nice: 0, policy: SCHED_OTHER });
    } finally {
      await hasher.close();
    }
  });
});
