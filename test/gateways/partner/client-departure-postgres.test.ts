import net from "node:net";
import { expect } from "chai";
import { groupCommitBatchSize, rpcDuration } from "../../../core/observability/metrics.js";
import { requirePostgres } from "../../support/db.js";
import { holdAuditWrites } from "../../support/db-holds.js";
import { countOf, queuedIn } from "../../support/metrics.js";
import { createPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { until } from "../../support/until.js";

const GET_KYC = { service: "vaultgate.partners.v1.PartnerResourcesService", method: "GetKycStatus" };

/**
 * A partner read whose HTTP client closes its connection while core's access checks wait in their
 * group-commit queue: the gateway aborts its core call, core drops it from the queue, and nothing
 * is written for it (no audit row, no rate-limit count); the reads whose clients wait are answered.
 */
describe("a partner read whose client leaves before its answer (PostgreSQL only)", function () {
  this.timeout(60_000);
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "a second session must hold the audit table while the access checks wait for it");
    stack = await startStack({ gateway: true });
  });
  after(() => stack?.close());

  it("GET /users/{id}/kyc: core drops the call of the client who left, and writes nothing for it", async () => {
    const partners = [await createPartner(stack), await createPartner(stack), await createPartner(stack)];
    const users = await Promise.all(partners.map((p) => createUserFor(stack, p, ["kyc:read"])));
    const tokens = await Promise.all(
      partners.map(
        async (p) => (await stack.clients.partners.issueToken({ clientId: p.clientId, clientSecret: p.clientSecret, scope: "kyc:read" })).accessToken,
      ),
    );
    const path = (n: number) => `/api/partner/users/${users[n]!.userId}/kyc`;
    const read = (n: number) => fetch(`${stack.url}${path(n)}`, { headers: { authorization: `Bearer ${tokens[n]}` } });
    const batches = () => countOf(groupCommitBatchSize, { batcher: "partner_access" });

    const lock = await holdAuditWrites(stack.core.db);
    let patient: Promise<Response[]>;
    try {
      const before = await batches();
      const waiting = await queuedIn("partner_access");
      // Two reads fill both batches the access queue runs at once; both wait for the audit table.
      const a = read(0);
      await until("the first batch is taken", async () => (await batches()) >= before + 1);
      const b = read(1);
      await until("the second batch is taken", async () => (await batches()) >= before + 2);
      patient = Promise.all([a, b]);

      const finishedBefore = await countOf(rpcDuration, GET_KYC);
      const { port } = new URL(stack.url);
      const socket = net.connect(Number(port), "127.0.0.1");
      socket.on("error", () => {});
      await new Promise((r) => socket.once("connect", r));
      socket.write(`GET ${path(2)} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${tokens[2]}\r\n\r\n`);
      // It reaches core's queue (had it not, its call would be refused before it starts).
      await until("the third read waits for a batch", async () => (await queuedIn("partner_access")) === waiting + 1);
      socket.destroy();
      // Core finished it while the batches (and so the first two reads) still wait: it left the queue.
      await until("core dropped the call of the client who left", async () => (await countOf(rpcDuration, GET_KYC)) === finishedBefore + 1);
      expect(await batches(), "no batch took it").to.equal(before + 2);
      expect(await queuedIn("partner_access"), "it left the queue").to.equal(waiting);
    } finally {
      await lock.release();
    }
    expect((await patient).map((r) => r.status)).to.deep.equal([200, 200]);
    const audited = (n: number) => stack.core.db("audit_records").where({ actor: `partner:${partners[n]!.clientId}`, action: "partner.kyc.read" });
    expect(await audited(0)).to.have.length(1);
    expect(await audited(1)).to.have.length(1);
    expect(await audited(2), "nothing written for the client who left").to.have.length(0);
    expect(await stack.core.db("rate_limit_windows").where("key", "like", `%${partners[2]!.clientId}%`), "nothing counted for it").to.have.length(0);
  });
});
