import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { createClient, createRouterTransport, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import pino from "pino";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { TreasuryService } from "../../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { createCore, type Core } from "../../../core/core.js";
import { createCoreClients, type CoreClients } from "../../../gateways/core-clients.js";
import { createScratchDatabase, requirePostgres } from "../../support/db.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { batchRequest, bindTreasury, createRecipient, withToken, type TreasuryPartner } from "../../support/treasury.js";
import { reasonOf } from "../../support/refusals.js";

/**
 * Treasury batches: exactly-once and never-overdraw under real concurrency, all-or-nothing across a
 * crash. PostgreSQL only: PGlite is one connection in one process and serialises everything anyway.
 */
describe("TreasuryService.ExecuteBatch under concurrency (Postgres)", () => {
  let stack: TestStack;
  before(async function () {
    requirePostgres(this, "concurrent batches need several connections");
    stack = await startStack();
  });
  after(() => stack?.close());

  async function setup(balanceCents: bigint) {
    const partner = await withToken(stack.clients, await createPartner(stack, { entitlements: ["treasury:write"] }));
    const payer = await bindTreasury(stack.admin, partner, { balanceCents });
    const user = await createRecipient(stack.admin, partner);
    return { partner, payer, user };
  }
  const balanceOf = async (p: TreasuryPartner) => Number((await stack.clients.treasury.getTreasury({ accessToken: p.token })).treasury!.availableCents);

  it("20 concurrent requests with one key debit once and all answer the same batch", async () => {
    const { partner, payer, user } = await setup(10_000n);
    const req = batchRequest(partner, payer, [
      { recipientUserId: user, amountCents: 700n },
      { recipientUserId: user, amountCents: 300n },
    ]);
    const results = await Promise.all(Array.from({ length: 20 }, () => stack.clients.treasury.executeBatch(req)));
    expect(new Set(results.map((r) => r.batch!.batchId)).size).to.equal(1);
    expect(results.filter((r) => !r.replayed)).to.have.length(1);
    expect(await balanceOf(partner)).to.equal(9_000);
    const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM treasury_executions WHERE partner_id = ?`, [partner.partnerId]);
    expect((rows as { n: number }[])[0]!.n).to.equal(2);
  });

  it("20 concurrent batches with different keys never overdraw", async () => {
    const { partner, payer, user } = await setup(7_000n);
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, () =>
        stack.clients.treasury.executeBatch(batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 1_000n }])).then(
          () => "ok" as const,
          (e: unknown) => reasonOf(e),
        ),
      ),
    );
    expect(outcomes.filter((o) => o === "ok")).to.have.length(7);
    expect(outcomes.filter((o) => o === Reason.INSUFFICIENT_FUNDS)).to.have.length(13);
    expect(await balanceOf(partner)).to.equal(0);
  });

  it("20 concurrent batches sharing one new execution_id pay it once", async () => {
    const { partner, payer, user } = await setup(100_000n);
    const shared = batchRequest(partner, payer, [{ recipientUserId: user, amountCents: 500n }]).items[0]!;
    const results = await Promise.all(
      Array.from({ length: 20 }, () => stack.clients.treasury.executeBatch({ ...batchRequest(partner, payer, []), items: [shared] })),
    );
    expect(results.filter((r) => r.batch!.totalCents === 500n)).to.have.length(1);
    expect(await balanceOf(partner)).to.equal(99_500);
  });

  describe("a core process killed mid-batch", function () {
    this.timeout(120_000);
    let scratch: { url: string; drop(): Promise<void> } | undefined;
    let core: Core | undefined;
    let admin: CoreClients;
    let child: ChildProcess | undefined;
    const adminToken = randomBytes(16).toString("hex");
    // Both cores share the keys outside the database, as replicas must.
    const outsideKeys = { WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64"), SIGNIN_CODE_KEY: randomBytes(32).toString("base64") };

    beforeEach(async () => {
      scratch = (await createScratchDatabase())!;
      core = await createCore({
        db: { url: scratch.url },
        logger: pino({ level: "silent" }),
        adminToken,
        issuer: "http://vaultgate.test",
        partnerAudience: "urn:vaultgate:partner-api",
        webhookSecretKey: outsideKeys.WEBHOOK_SECRET_KEY,
        signinCodeKey: outsideKeys.SIGNIN_CODE_KEY,
      });
      const auth: Interceptor = (next) => (req) => {
        req.header.set("authorization", `Bearer ${adminToken}`);
        return next(req);
      };
      admin = createCoreClients(createRouterTransport(core.routes, { router: { interceptors: core.interceptors }, transport: { interceptors: [auth] } }));
    });
    afterEach(async () => {
      if (child && child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await core?.close();
      await scratch?.drop();
    });

    /** Starts the child core with the seam armed; resolves with its URL and a promise of the pause. */
    async function startChild(stage: "before-commit" | "after-commit") {
      const script = fileURLToPath(new URL("../../support/treasury-core-child.ts", import.meta.url));
      child = spawn(process.execPath, ["--import", "tsx", script, scratch!.url, adminToken, stage], {
        stdio: ["ignore", "pipe", "inherit"],
        env: { ...process.env, ...outsideKeys },
      });
      const lines = createInterface({ input: child.stdout! });
      let onPaused!: (batchId: string) => void;
      const paused = new Promise<string>((resolve) => (onPaused = resolve));
      const url = await new Promise<string>((resolve, reject) => {
        child!.once("exit", (code) => reject(new Error(`child core exited with ${code}`)));
        lines.on("line", (line) => {
          const msg = JSON.parse(line) as { url?: string; paused?: string };
          if (msg.url) resolve(msg.url);
          if (msg.paused) onPaused(msg.paused);
        });
      });
      return { url, paused };
    }

    async function fixture() {
      const res = await admin.partners.createPartner({
        name: "Crash Co",
        slug: `crash-${randomBytes(3).toString("hex")}`,
        entitlements: { scopes: ["treasury:write"] },
      });
      const partner = await withToken(admin, { partnerId: res.partner!.partnerId, clientId: res.partner!.clientId, clientSecret: res.clientSecret });
      const payer = await bindTreasury(admin, partner, { balanceCents: 50_000n });
      const users = await Promise.all(Array.from({ length: 3 }, () => createRecipient(admin, partner)));
      const req = batchRequest(
        partner,
        payer,
        users.map((u, i) => ({ recipientUserId: u, amountCents: BigInt(1_000 * (i + 1)) })),
      );
      return { partner, req };
    }

    async function state(partnerId: string) {
      const { rows } = await core!.db.raw(
        `SELECT (SELECT balance_cents FROM treasuries WHERE partner_id = ?) AS balance,
                (SELECT count(*)::int FROM treasury_executions WHERE partner_id = ?) AS executions,
                (SELECT count(*)::int FROM treasury_batches WHERE partner_id = ?) AS batches`,
        [partnerId, partnerId, partnerId],
      );
      return (rows as { balance: number; executions: number; batches: number }[])[0]!;
    }

    it("killed before COMMIT leaves nothing, and the identical retry pays the whole batch once", async () => {
      const { partner, req } = await fixture();
      const { url, paused } = await startChild("before-commit");
      const remote = createClient(TreasuryService, createGrpcTransport({ baseUrl: url }));
      const call = remote.executeBatch(req).then(
        () => "answered",
        () => "unconfirmed",
      );
      await paused; // every row is written inside the open transaction
      child!.kill("SIGKILL");
      expect(await call).to.equal("unconfirmed");
      // Postgres rolls back the dead session's transaction and releases the treasury lock.
      expect(await state(partner.partnerId)).to.deep.equal({ balance: 50_000, executions: 0, batches: 0 });

      // A retry sends the identical body with the identical key.
      const retry = await admin.treasury.executeBatch(req);
      expect(retry.replayed).to.equal(false);
      expect(retry.batch!.totalCents).to.equal(6_000n);
      expect(await state(partner.partnerId)).to.deep.equal({ balance: 44_000, executions: 3, batches: 1 });
    });

    it("killed after COMMIT leaves the whole batch, and the identical retry replays it without paying again", async () => {
      const { partner, req } = await fixture();
      const { url, paused } = await startChild("after-commit");
      const remote = createClient(TreasuryService, createGrpcTransport({ baseUrl: url }));
      const call = remote.executeBatch(req).then(
        () => "answered",
        () => "unconfirmed",
      );
      const batchId = await paused;
      child!.kill("SIGKILL");
      expect(await call).to.equal("unconfirmed");
      expect(await state(partner.partnerId)).to.deep.equal({ balance: 44_000, executions: 3, batches: 1 });

      const retry = await admin.treasury.executeBatch(req);
      expect(retry.replayed).to.equal(true);
      expect(retry.batch!.batchId).to.equal(batchId);
      expect(await state(partner.partnerId)).to.deep.equal({ balance: 44_000, executions: 3, batches: 1 });
    });
  });
});
