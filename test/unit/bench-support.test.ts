import { expect } from "chai";
import { alternate, checkResponse, inTurns, roundRatios, startBenchChild, type Measurement } from "../../bench/support.js";

/** How every bench judges a response and orders and judges its rounds (bench/support.ts). */
describe("bench support: response checks and alternating rounds", () => {
  describe("checkResponse: every response's status and body", () => {
    it("accepts the expected status, and one of several when given a list", () => {
      expect(checkResponse({}, 200, "anything")).to.equal(undefined);
      expect(checkResponse({ status: [401, 429] }, 429, "")).to.equal(undefined);
      expect(checkResponse({ status: [401, 429] }, 500, "boom")).to.match(/^HTTP 500 \(want 401,429\): boom/);
      expect(checkResponse({}, 201, "")).to.match(/^HTTP 201 \(want 200\)/);
    });

    it("requires every dotted key in a JSON body", () => {
      const check = { keys: ["access_token", "result.structuredContent.outcome"] };
      expect(checkResponse(check, 200, JSON.stringify({ access_token: "t", result: { structuredContent: { outcome: "allowed" } } }))).to.equal(undefined);
      expect(checkResponse(check, 200, JSON.stringify({ access_token: "t", result: { structuredContent: {} } }))).to.match(
        /^missing result\.structuredContent\.outcome/,
      );
      expect(checkResponse(check, 200, JSON.stringify({ access_token: "t", result: null }))).to.match(/^missing result\.structuredContent\.outcome/);
      expect(checkResponse(check, 200, "<html>")).to.match(/^not JSON/);
    });

    it("fails a JSON-RPC error, a response without a result, and a tool error, though each is an HTTP 200", () => {
      const check = { jsonrpc: true };
      expect(checkResponse(check, 200, JSON.stringify({ jsonrpc: "2.0", id: 1, result: { content: [] } }))).to.equal(undefined);
      expect(checkResponse(check, 200, JSON.stringify({ jsonrpc: "2.0", id: 1, error: { code: -32602, message: "bad" } }))).to.match(
        /^JSON-RPC error: \{"code":-32602/,
      );
      expect(checkResponse(check, 200, JSON.stringify({ jsonrpc: "2.0", id: 1 }))).to.match(/^no JSON-RPC result/);
      expect(checkResponse(check, 200, JSON.stringify({ jsonrpc: "2.0", id: 1, result: { isError: true, content: [] } }))).to.match(/^tool error/);
    });
  });

  describe("inTurns", () => {
    it("measures every side once a round, the order turning every round", async () => {
      const calls: string[] = [];
      const turns = await inTurns(["A", "B", "C"], 4, async (side, round) => {
        calls.push(`${round}${side}`);
        return side.toLowerCase();
      });
      expect(calls).to.deep.equal(["0A", "0B", "0C", "1B", "1C", "1A", "2C", "2A", "2B", "3A", "3B", "3C"]);
      expect(turns.map((t) => `${t.round}${t.side}${t.index}${t.measured}`).slice(3, 6)).to.deep.equal(["2B1b", "2C2c", "2A0a"]);
      for (const t of turns) {
        expect(t.load.machine).to.be.a("number");
        expect(t.background).to.equal(""); // no bench PostgreSQL to watch here
      }
    });

    it("flips two sides every round (A B, B A, A B)", async () => {
      const calls: string[] = [];
      await inTurns(["A", "B"], 3, async (side) => void calls.push(side));
      expect(calls.join("")).to.equal("ABBAAB");
    });
  });

  describe("alternate", () => {
    /** alternate() prints its table and summary for the bench's reader; not for the test's. */
    async function quietly<T>(work: () => Promise<T>): Promise<T> {
      const { log, table } = console;
      console.log = console.table = () => {};
      try {
        return await work();
      } finally {
        Object.assign(console, { log, table });
      }
    }
    const measurement = (rps: number, failures = 0): Measurement => ({ rps, p50: 1, p99: 2, requests: rps, failures, samples: failures ? ["HTTP 500"] : [] });

    it("judges by the median of the per-round ratios, not the ratio of the medians", async () => {
      // Ours: 100, 300, 200; peer: 100, 100, 400. Per-round ratios 1, 3, 0.5: median 1.
      // The ratio of the medians (200 / 100) would say 2.
      const ours = [100, 300, 200];
      const peer = [100, 100, 400];
      const result = await quietly(() =>
        alternate(
          "test",
          [
            { name: "ours", measure: async (round) => measurement(ours[round]!) },
            { name: "peer", measure: async (round) => measurement(peer[round]!) },
          ],
          3,
        ),
      );
      expect(result.ratios).to.deep.equal([1, 3, 0.5]);
      expect(result.ratio).to.equal(1);
      expect(result.sides.map((s) => s.rps)).to.deep.equal([200, 100]);
      expect(result.failures).to.equal(0);
    });

    it("with three sides, keeps each side's rounds in order so any two can be compared round by round", async () => {
      // The rotation runs A B C, B C A, C A B; each side's rounds stay in round order.
      const rates = { ours: [100, 300, 200], peer: [100, 100, 400], third: [50, 600, 100] };
      const result = await quietly(() =>
        alternate(
          "test",
          (["ours", "peer", "third"] as const).map((name) => ({ name, measure: async (round: number) => measurement(rates[name][round]!) })),
          3,
        ),
      );
      expect(result.ratios).to.deep.equal([1, 3, 0.5]);
      expect(roundRatios(result.sides[0]!, result.sides[2]!)).to.deep.equal([2, 0.5, 2]);
    });

    it("counts every failed response of either side", async () => {
      const result = await quietly(() =>
        alternate(
          "test",
          [
            { name: "ours", measure: async (round) => measurement(100, round === 1 ? 2 : 0) },
            { name: "peer", measure: async () => measurement(100, 1) },
          ],
          3,
        ),
      );
      expect(result.failures).to.equal(5);
      expect(result.sides.map((s) => s.failures)).to.deep.equal([2, 3]);
    });
  });

  describe("startBenchChild: a server in a process of its own", () => {
    it("reads the child's first JSON line, answers calls over IPC, refuses an unknown call, and stops it", async function () {
      this.timeout(30_000);
      // The OAuth peer: node-oidc-provider minting codes for a PKCE challenge.
      const peer = await startBenchChild<{ tokenUrl: string; clientId: string }>("agent-oauth-peer", ["challenge-of-the-test-0123456789abcdefghij"]);
      try {
        expect(peer.info.tokenUrl).to.match(/^http:\/\/127\.0\.0\.1:\d+\/token$/);
        expect(peer.info.clientId).to.equal("bench-client");
        const codes = await peer.call<string[]>("codes", 3);
        expect(codes).to.have.length(3);
        expect(new Set(codes).size).to.equal(3);
        let refusal: unknown;
        await peer.call("no-such-call").catch((err: unknown) => (refusal = err));
        expect(String(refusal)).to.match(/agent-oauth-peer: unknown call no-such-call/);
      } finally {
        await peer.stop();
      }
      let afterStop: unknown;
      await peer.call("codes", 1).catch((err: unknown) => (afterStop = err));
      expect(String(afterStop)).to.match(/agent-oauth-peer exited/);
    });
  });
});
