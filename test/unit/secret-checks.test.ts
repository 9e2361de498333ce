import { readdirSync, readFileSync } from "node:fs";
import { Code, ConnectError } from "@connectrpc/connect";
import { expect } from "chai";
import { createSecretHasher } from "../../core/secrets/hasher.js";
import { secretChecksAbandoned, secretDerivations } from "../../core/observability/metrics.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { expectRefused, reasonOf, thrownBy } from "../support/refusals.js";

const params = { N: 1024, r: 8, p: 1 };

async function overloaded(promise: Promise<unknown>) {
  const { detail } = await expectRefused(promise, Reason.OVERLOADED);
  expect(detail.retryAfterSeconds).to.be.within(1, 30);
}

const known = (key: string) => ({ known: true, key });
const unknownFrom = (address: string) => ({ known: false, key: address });

describe("secret checks: fair scheduling and shedding", () => {
  it("sheds only the flow that is over its own bound, with OVERLOADED and a Retry-After hint", async () => {
    const hasher = await createSecretHasher({ params, maxConcurrent: 1, maxQueue: 100, maxPerFlow: 2, maxWaitMs: 60_000 });
    try {
      const stored = await hasher.hash("s3cret");
      const flood = unknownFrom("10.0.0.9");
      const running = [hasher.verify("wrong", stored, flood), hasher.verify("wrong", stored, flood), hasher.verify("wrong", stored, flood)];
      expect(hasher.load()).to.include({ active: 1, queued: 2, unknown: 2 });
      await overloaded(hasher.verify("wrong", stored, flood));
      // Another flow still gets in line, the right secret of a known client among them.
      const honest = hasher.verify("s3cret", stored, known("gpc_honest"));
      expect(await Promise.all([...running, honest])).to.deep.equal([false, false, false, true]);
      expect(hasher.load()).to.include({ active: 0, queued: 0 });
    } finally {
      await hasher.close();
    }
  });

  it("serves flows in turn, known and unknown classes alternating, whatever one flow's length", async () => {
    const hasher = await createSecretHasher({ params, maxConcurrent: 1, maxQueue: 100, maxPerFlow: 100, maxWaitMs: 60_000 });
    try {
      const stored = await hasher.hash("s3cret");
      const order: string[] = [];
      const track = (name: string, flow: { known: boolean; key: string }) => hasher.verify("x", stored, flow).then(() => order.push(name));
      const all = [track("first", unknownFrom("a"))];
      for (let i = 1; i <= 4; i++) all.push(track(`a${i}`, unknownFrom("a")));
      all.push(track("b1", unknownFrom("b")));
      all.push(track("x1", known("x")), track("x2", known("x")));
      all.push(track("y1", known("y")));
      await Promise.all(all);
      expect(order).to.deep.equal(["first", "x1", "a1", "y1", "b1", "x2", "a2", "a3", "a4"]);
    } finally {
      await hasher.close();
    }
  });

  it("when the whole queue is full, sheds the longest flow's newest waiter to admit another flow", async () => {
    const hasher = await createSecretHasher({ params, maxConcurrent: 1, maxQueue: 4, maxPerFlow: 100, maxWaitMs: 60_000 });
    try {
      const stored = await hasher.hash("s3cret");
      const flood = unknownFrom("10.0.0.9");
      const settled = (p: Promise<boolean>) =>
        p.then(
          (ok) => (ok ? "ok" : "wrong"),
          (err: unknown) => (reasonOf(err) === Reason.OVERLOADED ? "shed" : String(err)),
        );
      const floods = Array.from({ length: 5 }, () => settled(hasher.verify("wrong", stored, flood)));
      expect(hasher.load()).to.include({ active: 1, queued: 4 });
      // The flood itself is refused once the queue is full...
      const extra = settled(hasher.verify("wrong", stored, flood));
      // ...and a known client's check takes the place of the flood's newest waiter.
      const honest = settled(hasher.verify("s3cret", stored, known("gpc_honest")));
      expect(await extra).to.equal("shed");
      expect(await honest).to.equal("ok");
      expect(await Promise.all(floods)).to.deep.equal(["wrong", "wrong", "wrong", "wrong", "shed"]);
    } finally {
      await hasher.close();
    }
  });

  it("sheds a check whose expected wait exceeds maxWaitMs, without queueing it", async () => {
    const hasher = await createSecretHasher({ params, maxConcurrent: 1, maxQueue: 100, maxWaitMs: 1 });
    try {
      const stored = await hasher.hash("s3cret");
      const first = hasher.verify("s3cret", stored);
      await overloaded(hasher.verify("s3cret", stored));
      expect(hasher.load().queued).to.equal(0);
      expect(await first).to.equal(true);
    } finally {
      await hasher.close();
    }
  });

  it("drops a waiting derivation whose caller's deadline passes: DeadlineExceeded, never derived, and the next waiter takes the slot", async () => {
    const hasher = await createSecretHasher({ params, maxConcurrent: 1, maxQueue: 100, maxWaitMs: 60_000 });
    try {
      const stored = await hasher.hash("s3cret");
      const derived = async () => (await secretDerivations.get()).values[0]?.value ?? 0;
      const dropped = async () => (await secretChecksAbandoned.get()).values[0]?.value ?? 0;
      const before = { derived: await derived(), dropped: await dropped() };
      const deadline = new AbortController();
      const first = hasher.verify("s3cret", stored, known("gpc_a"));
      const late = hasher.verify("s3cret", stored, known("gpc_b"), deadline.signal);
      const next = hasher.verify("wrong", stored, known("gpc_c"));
      expect(hasher.load()).to.include({ active: 1, queued: 2 });
      deadline.abort(new ConnectError("the operation timed out", Code.DeadlineExceeded));
      const err = (await thrownBy(late)) as ConnectError;
      expect(err).to.be.instanceOf(ConnectError);
      expect(Code[err.code]).to.equal("DeadlineExceeded");
      expect(hasher.load()).to.include({ active: 1, queued: 1 });
      expect(await Promise.all([first, next])).to.deep.equal([true, false]);
      // A deadline already spent is refused before it queues.
      expect(Code[((await thrownBy(hasher.verify("s3cret", stored, known("gpc_d"), deadline.signal))) as ConnectError).code]).to.equal("DeadlineExceeded");
      expect(hasher.load()).to.include({ active: 0, queued: 0 });
      // Derived: the first and the next; dropped: the late caller, in the queue and then before it.
      expect({ derived: await derived(), dropped: await dropped() }).to.deep.equal({ derived: before.derived + 2, dropped: before.dropped + 2 });
    } finally {
      await hasher.close();
    }
  });

  it("hashes at N=2^10 by default, verifies hashes of older parameters and says they need a rehash", async () => {
    const current = await createSecretHasher();
    const old = await createSecretHasher({ params: { N: 2 ** 14, r: 8, p: 1 } });
    try {
      const fresh = await current.hash("s3cret");
      expect(fresh).to.match(/^scrypt\$1024\$8\$1\$/);
      expect(current.dummyHash).to.match(/^scrypt\$1024\$8\$1\$/);
      expect(current.needsRehash(fresh)).to.equal(false);
      const legacy = await old.hash("s3cret");
      expect(legacy).to.match(/^scrypt\$16384\$8\$1\$/);
      expect(await current.verify("s3cret", legacy)).to.equal(true);
      expect(await current.verify("wrong", legacy)).to.equal(false);
      expect(current.needsRehash(legacy)).to.equal(true);
    } finally {
      await current.close();
      await old.close();
    }
  });
});

describe("secret checks: derivations at the lowest CPU priority", () => {
  /** Id, nice value and scheduling policy of each thread of this process, from /proc (Linux, where CI and the service run). */
  const threads = () =>
    readdirSync("/proc/self/task").flatMap((tid) => {
      let stat: string;
      try {
        stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
      } catch (err) {
        // A thread (an earlier test's, exiting) can be gone between the listing and the read.
        if ((err as NodeJS.ErrnoException).code === "ENOENT" || (err as NodeJS.ErrnoException).code === "ESRCH") return [];
        throw err;
      }
      // Fields after the command (which may hold spaces): state is field 3, nice field 19, policy field 41.
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      return [{ tid, nice: Number(f[16]), policy: Number(f[38]) }];
    });
  const SCHED_OTHER = 0;
  const SCHED_IDLE = 5;
  const lowest = (t: { nice: number; policy: number }) => t.nice === 19 && t.policy === SCHED_IDLE;

  it("runs every derivation on its own threads at nice 19 under SCHED_IDLE and leaves the serving threads alone", async () => {
    const before = new Set(threads().map((t) => t.tid));
    const hasher = await createSecretHasher({ params, maxConcurrent: 2 });
    try {
      const stored = await hasher.hash("s3cret");
      expect(await Promise.all([hasher.verify("s3cret", stored), hasher.verify("wrong", stored)])).to.deep.equal([true, false]);
      expect(await hasher.priority()).to.deep.equal({ niced: true, idle: true });
      // Counted by thread id: a thread of an earlier test's hasher may still be exiting.
      const started = threads().filter((t) => !before.has(t.tid));
      expect(started.filter(lowest)).to.have.length(2);
      // This thread (the event loop that serves requests) keeps its priority and policy.
      const self = readFileSync("/proc/thread-self/stat", "utf8");
      const f = self.slice(self.lastIndexOf(")") + 2).split(" ");
      expect({ nice: Number(f[16]), policy: Number(f[38]) }).to.deep.equal({ nice: 0, policy: SCHED_OTHER });
    } finally {
      await hasher.close();
    }
  });
});
