import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";

/**
 * A registration burst larger than the secret-derivation queue: the shed ones answer 503
 * `temporarily_unavailable` with Retry-After, as load (like a rate limit), never as a bug
 * logged at error level with its stack.
 */
describe("dynamic client registration when secret derivations are shed", function () {
  this.timeout(30_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, scrypt: { N: 2 ** 14, r: 8, p: 1 }, secretChecks: { maxConcurrent: 1, maxQueue: 1, maxPerFlow: 1 } });
  });
  after(() => stack?.close());

  it("a burst of 12: every answer 201 or 503 with Retry-After, some shed, and no error-level log line", async () => {
    const body = JSON.stringify({ client_name: "Burst", redirect_uris: ["http://127.0.0.1:9/cb"], scope: "accounts:read" });
    const answers = await Promise.all(
      Array.from({ length: 12 }, () => fetch(`${stack.url}/oauth2/register`, { method: "POST", headers: { "content-type": "application/json" }, body })),
    );
    const shed = answers.filter((r) => r.status === 503);
    expect(answers.every((r) => r.status === 201 || r.status === 503)).to.equal(true);
    expect(shed.length).to.be.greaterThan(0);
    for (const r of shed) {
      expect(r.headers.get("retry-after")).to.match(/^\d+$/);
      expect(((await r.json()) as { error: string }).error).to.equal("temporarily_unavailable");
    }
    const errors = stack.logs.lines.filter((l) => (JSON.parse(l) as { level: number }).level >= 50);
    expect(errors).to.deep.equal([]);
  });
});
