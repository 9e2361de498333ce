import { expect } from "chai";
import { secretChecksQueued } from "../../../core/observability/metrics.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { randomBytes } from "node:crypto";
import { basic, createPartner } from "../../support/partners.js";
import { post, postAgentTokenFrom, randomAgentForm, type Answer } from "../../support/token-flood.js";

/** Derivations waiting in the gate for client ids nobody registered (the secret-check gauge). */
async function unknownQueued(): Promise<number> {
  return (await secretChecksQueued.get()).values.find((v) => v.labels.lane === "unknown")?.value ?? 0;
}

async function until(condition: () => Promise<boolean>): Promise<void> {
  while (!(await condition())) await new Promise((resolve) => setTimeout(resolve, 5));
}

describe("token endpoints: client ids nobody registered", function () {
  this.timeout(120_000);

  describe("a check shed while waiting for a derivation", () => {
    const LIMIT = 6;
    let stack: TestStack;
    before(async () => {
      // One derivation at a time, slow enough that waiting checks are still queued when
      // the others arrive; a queue of three, so a fourth flow's arrival sheds a waiter.
      stack = await startStack({
        gateway: true,
        scrypt: { N: 2 ** 16, r: 8, p: 1 },
        secretChecks: { maxConcurrent: 1, maxQueue: 3, maxPerFlow: 8, maxWaitMs: 600_000 },
        clientSecretFailuresPerMinute: LIMIT,
      });
    });
    after(() => stack.close());

    it("gives its slot back: the id keeps its whole per-minute budget of checked failures", async () => {
      // One client id; a fresh wrong secret each time, so no two checks share a derivation.
      const { client_id } = randomAgentForm();
      const fromProber = () => postAgentTokenFrom(stack.url, "127.0.4.1", { ...randomAgentForm(), client_id });
      // One check runs, three wait; each was counted before it entered the gate.
      const burst = Array.from({ length: 4 }, fromProber);
      await until(async () => (await unknownQueued()) >= 3);
      // Two other flows arrive at a full queue: each sheds the prober's newest waiter.
      const others = [postAgentTokenFrom(stack.url, "127.0.4.2"), postAgentTokenFrom(stack.url, "127.0.4.3")];
      const answers: Answer[] = await Promise.all(burst);
      await Promise.all(others);

      const checked = answers.filter((a) => a.status === 401).length;
      const shed = answers.filter((a) => a.status === 503);
      expect(checked + shed.length, JSON.stringify(answers)).to.equal(4);
      expect(shed.length).to.be.at.least(1);
      for (const a of shed) expect(a.body.error).to.equal("temporarily_unavailable");

      // Only the checked failures count: the rest of the minute's budget, then 429.
      const later: number[] = [];
      for (let i = 0; i <= LIMIT - checked; i++) later.push((await fromProber()).status);
      expect(later).to.deep.equal([...Array<number>(LIMIT - checked).fill(401), 429]);
    });
  });

  describe("more ids than the in-memory bound", () => {
    let stack: TestStack;
    before(async () => {
      // Three ids kept one by one, two attempts each a minute.
      stack = await startStack({ gateway: true, unknownClientIds: 3, tokenIssuanceLimitPerMinute: 2 });
    });
    after(() => stack.close());

    const wrong = (clientId: string) => post(stack.url, basic(clientId, `gps_${randomBytes(32).toString("base64url")}`));
    const madeUp = () => `gpc_probe_${randomBytes(6).toString("hex")}`;

    it("an id pushed out of memory keeps its refusal, exactly like a registered id's, for the rest of the window", async () => {
      const registered = (await createPartner(stack)).clientId;
      const probed = madeUp();
      const spent = async (id: string) => [(await wrong(id)).status, (await wrong(id)).status, (await wrong(id)).status];
      expect(await spent(registered)).to.deep.equal([401, 401, 429]);
      expect(await spent(probed)).to.deep.equal([401, 401, 429]);
      // Three fresh ids fill the bound and push the probed id, the oldest, out.
      for (let i = 0; i < 3; i++) expect((await wrong(madeUp())).status).to.equal(401);
      // Neither id has budget again inside the window: the answers tell which one exists by nothing.
      expect([(await wrong(registered)).status, (await wrong(probed)).status]).to.deep.equal([429, 429]);
      stack.clock.advance(61_000);
      expect([(await wrong(registered)).status, (await wrong(probed)).status]).to.deep.equal([401, 401]);
    });
  });
});
