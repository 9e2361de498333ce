import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { expect } from "chai";
import { groupCommitBatchSize, rpcDuration } from "../../core/observability/metrics.js";
import { BudgetsService } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { PartnerResourcesService } from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { createOwner, grantFor, payment } from "../support/budgets.js";
import { grpcCoreSuite } from "../support/grpc-core.js";
import { createPartner } from "../support/partners.js";
import { requirePostgres } from "../support/db.js";
import { holdAuditWrites } from "../support/db-holds.js";
import { countOf } from "../support/metrics.js";
import { thrownBy } from "../support/refusals.js";
import { createUserFor } from "../support/resources.js";
import { until } from "../support/until.js";

/** The caller's deadline: far shorter than the queue, which stays blocked until the test frees it. */
const DEADLINE_MS = 300;

/**
 * Group-committed reads that write their audit row (SimulatePayment, the partner access checks): with both
 * batches of a queue waiting for the audit table, a caller whose deadline passes in the queue leaves it at
 * once with nothing written; callers without a deadline are answered once the table is free.
 */
describe("a deadline that passes in a group-commit queue (core on its real port)", function () {
  this.timeout(60_000);
  const suite = grpcCoreSuite();
  beforeEach(function () {
    requirePostgres(this, "a second session must hold the audit table while the batches wait for it");
  });

  const transport = () => createGrpcTransport({ baseUrl: suite.core.server.url });
  const db = () => suite.stack.core.db;
  const batches = (batcher: string) => countOf(groupCommitBatchSize, { batcher });
  /** Calls of `Service/Method` core finished, whatever their code. */
  const finished = (method: string) => countOf(rpcDuration, { service: method.split("/")[0]!, method: method.split("/")[1]! });
  /** Polls until `done` holds (the server's state, not a time). */
  /**
   * Starts `first` and `second` (no deadline) one after the other, so both batches a queue runs at once
   * wait for the audit table, then `late` with a deadline; `late` must be DEADLINE_EXCEEDED before the
   * table is freed. Returns the answers of the first two.
   */
  async function behindTwoBatches(
    batcher: string,
    method: string,
    first: () => Promise<unknown>,
    second: () => Promise<unknown>,
    late: () => Promise<unknown>,
  ) {
    const lock = await holdAuditWrites(db());
    let patient: Promise<unknown[]>;
    try {
      const before = await batches(batcher);
      const a = first();
      await until("the first batch is taken", async () => (await batches(batcher)) >= before + 1);
      const b = second();
      await until("the second batch is taken", async () => (await batches(batcher)) >= before + 2);
      patient = Promise.all([a, b]);
      const finishedBefore = await finished(method);
      const err = (await thrownBy(late)) as ConnectError;
      expect(err, String(err)).to.be.instanceOf(ConnectError);
      expect(Code[err.code], err.rawMessage).to.equal("DeadlineExceeded");
      // Core itself finished it while the batches (and so the first two calls) still wait: it left the queue.
      await until("core answered the late call from its queue", async () => (await finished(method)) === finishedBefore + 1);
      expect(await batches(batcher), "no batch took the late call").to.equal(before + 2);
    } finally {
      await lock.release();
    }
    return patient;
  }

  it("SimulatePayment: no audit row for the caller who left; the others are answered and audited", async () => {
    const budgets = createClient(BudgetsService, transport());
    const owners = [await createOwner(suite.stack), await createOwner(suite.stack), await createOwner(suite.stack)];
    const tokens = await Promise.all(owners.map((o) => grantFor(suite.stack, o)));
    const simulate =
      (n: number, options = {}) =>
      () =>
        budgets.simulatePayment({ accessToken: tokens[n]!, payment: payment() }, options);
    const answers = await behindTwoBatches(
      "payment_context",
      "vaultgate.budgets.v1.BudgetsService/SimulatePayment",
      simulate(0),
      simulate(1),
      simulate(2, { timeoutMs: DEADLINE_MS }),
    );
    expect(answers).to.have.length(2);
    const audited = async (n: number) => db()("audit_records").where({ actor: `agent:${owners[n]!.agentPrincipalId}`, action: "payments.simulate" });
    expect(await audited(0)).to.have.length(1);
    expect(await audited(1)).to.have.length(1);
    expect(await audited(2), "nothing written for the caller who left").to.have.length(0);
  });

  it("GetKycStatus: no audit row and no rate-limit count for the caller who left; the others are answered", async () => {
    const resources = createClient(PartnerResourcesService, transport());
    const partners = [await createPartner(suite.stack), await createPartner(suite.stack), await createPartner(suite.stack)];
    const users = await Promise.all(partners.map((p) => createUserFor(suite.stack, p, ["kyc:read"])));
    const tokens = await Promise.all(
      partners.map(
        async (p) => (await suite.stack.clients.partners.issueToken({ clientId: p.clientId, clientSecret: p.clientSecret, scope: "kyc:read" })).accessToken,
      ),
    );
    const read =
      (n: number, options = {}) =>
      () =>
        resources.getKycStatus({ accessToken: tokens[n]!, userId: users[n]!.userId }, options);
    const answers = await behindTwoBatches(
      "partner_access",
      "vaultgate.partners.v1.PartnerResourcesService/GetKycStatus",
      read(0),
      read(1),
      read(2, { timeoutMs: DEADLINE_MS }),
    );
    expect(answers).to.have.length(2);
    const audited = async (n: number) => db()("audit_records").where({ actor: `partner:${partners[n]!.clientId}`, action: "partner.kyc.read" });
    expect(await audited(0)).to.have.length(1);
    expect(await audited(1)).to.have.length(1);
    expect(await audited(2), "nothing written for the caller who left").to.have.length(0);
    expect(await db()("rate_limit_windows").where("key", "like", `%${partners[2]!.clientId}%`), "nothing counted for it").to.have.length(0);
  });
});
