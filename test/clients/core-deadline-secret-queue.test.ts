import { randomBytes } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import { expect } from "chai";
import { grpcCoreSuite, type WireResponse } from "../support/grpc-core.js";
import { coreMetricsListener } from "../support/metrics.js";
import { createPartner, type TestPartner } from "../support/partners.js";
import { expectGrpcRefused, grpcRefusalOf, statusName } from "../support/refusals.js";
import { OLD_SCRYPT } from "../support/token-flood.js";

const PARTNERS = "vaultgate.partners.v1.PartnersService";
/** Wrong secrets queued ahead of the caller with a deadline: about 50 ms each, one at a time. */
const FLOOD = 24;
/** The caller with a deadline joins once this many are still waiting: far more work than its 100 ms. */
const AHEAD = FLOOD / 2;

/**
 * Secret derivations queue for a slot (core/secrets). A caller whose deadline passes while it
 * waits leaves the queue without its derivation; a caller without a deadline is served as before.
 */
describe("a deadline that passes in the secret-check queue (core on its real port)", function () {
  this.timeout(120_000);
  const suite = grpcCoreSuite({
    // One derivation at a time, at the dearer old parameters, and no shedding: the queue only grows.
    scrypt: OLD_SCRYPT,
    secretChecks: { maxConcurrent: 1, maxQueue: 64, maxPerFlow: 64, maxWaitMs: 600_000 },
    tokenIssuanceLimitPerMinute: 1000,
  });
  let metrics: Awaited<ReturnType<typeof coreMetricsListener>>;
  before(async () => {
    metrics = await coreMetricsListener();
  });
  after(() => metrics?.close());

  const gauge = async (name: string, labels: Record<string, string> = {}) => (await metrics.scrape()).value(name, labels) ?? 0;
  const counts = async () => ({
    derived: await gauge("vaultgate_secret_derivations_total"),
    abandoned: await gauge("vaultgate_secret_checks_abandoned_total"),
  });
  const queued = async () =>
    (await gauge("vaultgate_secret_checks_queued", { lane: "known" })) + (await gauge("vaultgate_secret_checks_queued", { lane: "unknown" }));
  /** Polls the queue until `done` holds (the server's state, not a time). */
  async function until(what: string, done: () => Promise<boolean>) {
    for (let i = 0; i < 3000 && !(await done()); i++) await new Promise((r) => setTimeout(r, 10));
    const state = { queued: await queued(), active: await gauge("vaultgate_secret_checks_active"), ...(await counts()) };
    expect(await done(), `${what}: ${JSON.stringify(state)}`).to.equal(true);
  }
  const issue = (p: TestPartner, secret: string, options: grpc.CallOptions = {}) =>
    suite.core.call(PARTNERS, "IssueToken", { client_id: p.clientId, client_secret: secret }, new grpc.Metadata(), options);
  const successes = async (p: TestPartner) =>
    suite.stack.core.db("audit_records").where({ action: "partner.token.issue", actor: `partner:${p.clientId}`, outcome: "success" });

  it("its derivation never runs and nothing is issued for it; a caller without a deadline still gets its token", async () => {
    const victim = await createPartner(suite.stack);
    const honest = await createPartner(suite.stack);
    const before = await counts();
    // The victim's own client id flooded with wrong secrets: its flow's queue is long.
    const flood = Array.from({ length: FLOOD }, () =>
      issue(victim, `gps_${randomBytes(32).toString("base64url")}`).then(
        () => "issued",
        (err: grpc.ServiceError) => statusName(err.code),
      ),
    );
    await until("the flood is queued", async () => (await queued()) >= AHEAD);
    // The victim's real secret, behind its own flood, with a deadline far shorter than the queue.
    const late = grpcRefusalOf(issue(victim, victim.clientSecret, { deadline: Date.now() + 100 }));
    const answered: Promise<WireResponse> = issue(honest, honest.clientSecret);

    const err = await late;
    expect(statusName(err.code), err.details).to.equal("DEADLINE_EXCEEDED");
    expect((await answered).access_token).to.be.a("string");
    expect(new Set(await Promise.all(flood))).to.deep.equal(new Set(["UNAUTHENTICATED"]));
    await until("the queue is empty", async () => (await queued()) === 0 && (await gauge("vaultgate_secret_checks_active")) === 0);

    const after = await counts();
    expect({ derived: after.derived - before.derived, abandoned: after.abandoned - before.abandoned }).to.deep.equal({ derived: FLOOD + 1, abandoned: 1 });
    expect(await successes(victim), "no token issued for the caller who left").to.have.length(0);
    expect(await successes(honest)).to.have.length(1);
  });

  it("a caller without a deadline that shares the derivation of one who left still gets its token", async () => {
    const victim = await createPartner(suite.stack);
    const flood = Array.from({ length: FLOOD }, () => issue(victim, `gps_${randomBytes(32).toString("base64url")}`).catch(() => undefined));
    await until("the flood is queued", async () => (await queued()) >= AHEAD);
    // The same secret twice at once shares one derivation: the first caller's deadline passes.
    const late = issue(victim, victim.clientSecret, { deadline: Date.now() + 100 });
    const patient = issue(victim, victim.clientSecret);
    await expectGrpcRefused(late, grpc.status.DEADLINE_EXCEEDED);
    expect((await patient).access_token).to.be.a("string");
    await Promise.all(flood);
    expect(await successes(victim)).to.have.length(1);
  });
});
