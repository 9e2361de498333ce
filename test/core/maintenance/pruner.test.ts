import { expect } from "chai";
import { randomBytes, randomUUID } from "node:crypto";
import { startStack, type TestStack } from "../../support/stack.js";
import { createUser } from "../../support/agent-oauth.js";
import { createOwner, ownerSession } from "../../support/budgets.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor } from "../../support/resources.js";
import { createRateLimitStore } from "../../../core/rate-limits/store.js";
import { createPruner } from "../../../core/maintenance/pruner.js";
import { sha256Hex } from "../../../lib/crypto.js";

const HOUR = 3600_000;
const DAY = 24 * HOUR;

/** Pruning: expired rows go, live ones stay (PGlite and PostgreSQL). */
describe("Pruner (core/maintenance/pruner.ts)", function () {
  this.timeout(60_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack?.close());

  const exists = async (table: string, where: Record<string, unknown>) => Boolean(await stack.core.db(table).where(where).first());

  async function insertCode(owner: { userId: string; vaultId: string; agentPrincipalId: string }, clientId: string, expiresAt: Date, consumed: boolean) {
    const codeHash = sha256Hex(randomBytes(32).toString("hex"));
    await stack.core.db("authorization_codes").insert({
      code_hash: codeHash,
      client_id: clientId,
      user_id: owner.userId,
      agent_principal_id: owner.agentPrincipalId,
      vault_id: owner.vaultId,
      scopes: ["accounts:read"],
      redirect_uri: "https://agent.example/cb",
      code_challenge: "x".repeat(43),
      step_up: false,
      expires_at: expiresAt,
      consumed_at: consumed ? new Date(expiresAt.getTime() - 30_000) : null,
    });
    return codeHash;
  }

  async function insertEvent(partnerId: string, createdAt: Date, state: "pending" | "delivered" | "failed") {
    const id = randomUUID();
    await stack.core.db("partner_events").insert({
      id,
      partner_id: partnerId,
      type: "kyc.status_changed",
      data: JSON.stringify({}),
      created_at: createdAt,
      next_attempt_at: createdAt,
      delivery_state: state,
      delivered_at: state === "delivered" ? createdAt : null,
    });
    return id;
  }

  it("removes expired rate-limit windows, codes, sessions, one-time codes, old events and old dev mail; keeps everything live", async () => {
    const limits = createRateLimitStore(stack.core.db);
    const tag = randomBytes(4).toString("hex");
    const owner = await createOwner(stack);
    const clientId = `prune-client-${tag}`;
    await stack.core.db("oauth_clients").insert({
      client_id: clientId,
      secret_hash: "x",
      client_name: "prune test",
      redirect_uris: ["https://agent.example/cb"],
      grant_types: ["authorization_code"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_basic",
      scopes: ["accounts:read"],
      created_at: stack.clock(),
    });
    const partner = await createPartner(stack);
    const t0 = stack.clock();

    // Day 0: what will have expired by day 2.
    const oldWindow = `prune:${tag}:old`;
    await limits.hit(oldWindow, 5, 60, t0);
    const oldCode = await insertCode(owner, clientId, new Date(t0.getTime() + 60_000), true);
    const oldUnusedCode = await insertCode(owner, clientId, new Date(t0.getTime() + 60_000), false);
    const early = await createUser(stack);
    await ownerSession(stack, early.userId); // a session (12 h) and two consumed/expiring challenges, a dev mail
    const endedToken = await ownerSession(stack, early.userId);
    await stack.clients.grants.endSession({ sessionToken: endedToken });
    const monthAgo = new Date(t0.getTime() - 30 * DAY); // 32 days before the pass: past the 30-day retention
    const oldEvents = [await insertEvent(partner.partnerId, monthAgo, "delivered"), await insertEvent(partner.partnerId, monthAgo, "failed")];
    // Pending that long: the partner never set a webhook URL, so only the feed holds it.
    const oldPending = await insertEvent(partner.partnerId, new Date(t0.getTime() - 60 * DAY), "pending");

    // Day 2 (plus a margin past the 1-day retentions), and what is still live then.
    stack.clock.advance(2 * DAY);
    const t1 = stack.clock();
    const liveWindow = `prune:${tag}:live`;
    await limits.hit(liveWindow, 2, 600, new Date(t1.getTime() - 5 * 60_000));
    await limits.hit(liveWindow, 2, 600, new Date(t1.getTime() - 4 * 60_000));
    const justEnded = `prune:${tag}:edge`;
    await limits.hit(justEnded, 5, 60, new Date(t1.getTime() - 59_999)); // its window ends 1 ms from now
    const recentCode = await insertCode(owner, clientId, new Date(t1.getTime() - HOUR), true); // expired, within the 1-day grace
    const liveCode = await insertCode(owner, clientId, new Date(t1.getTime() + 60_000), false);
    const late = await createUser(stack);
    const liveToken = await ownerSession(stack, late.userId);
    // Unused, live 10 minutes (a step-up: a second sign-in code within 30 s would be refused).
    const pending = await stack.clients.grants.startSignIn({ sessionToken: liveToken });
    const recentEvent = await insertEvent(partner.partnerId, new Date(t1.getTime() - 29 * DAY), "delivered");
    const recentPending = await insertEvent(partner.partnerId, new Date(t1.getTime() - 29 * DAY), "pending");
    const auditBefore = Number((await stack.core.db("audit_records").count({ n: "*" }))[0]!.n);

    const sessions = async (userId: string) => (await stack.core.db("web_sessions").where({ user_id: userId })).length;
    const challenges = async (userId: string) => (await stack.core.db("signin_challenges").where({ user_id: userId })).length;
    const mail = async (email: string) => (await stack.core.db("dev_outbox").where({ email })).length;
    expect(await sessions(early.userId)).to.equal(2);
    expect(await challenges(early.userId)).to.equal(2);

    const report = await stack.core.prune();
    for (const n of Object.values(report)) expect(n).to.be.a("number");

    // Gone.
    expect(await exists("rate_limit_logs", { key: oldWindow })).to.equal(false);
    expect(await exists("authorization_codes", { code_hash: oldCode })).to.equal(false);
    expect(await exists("authorization_codes", { code_hash: oldUnusedCode })).to.equal(false);
    expect(await sessions(early.userId)).to.equal(0);
    expect(await challenges(early.userId)).to.equal(0);
    expect(await mail(early.email)).to.equal(0);
    for (const id of [...oldEvents, oldPending]) expect(await exists("partner_events", { id })).to.equal(false);
    // Kept.
    expect(await exists("rate_limit_logs", { key: liveWindow })).to.equal(true);
    expect(await exists("rate_limit_logs", { key: justEnded })).to.equal(true);
    expect(await exists("authorization_codes", { code_hash: recentCode })).to.equal(true);
    expect(await exists("authorization_codes", { code_hash: liveCode })).to.equal(true);
    expect(await sessions(late.userId)).to.equal(1);
    expect(await exists("signin_challenges", { id: pending.challengeId })).to.equal(true);
    expect(await mail(late.email)).to.equal(2);
    expect(await exists("partner_events", { id: recentEvent })).to.equal(true);
    expect(await exists("partner_events", { id: recentPending })).to.equal(true);
    expect(Number((await stack.core.db("audit_records").count({ n: "*" }))[0]!.n)).to.be.at.least(auditBefore);

    // What stayed still works: the session signs in, the live window still refuses its third attempt.
    expect((await stack.clients.grants.getSession({ sessionToken: liveToken })).session!.userId).to.equal(late.userId);
    expect((await limits.hit(liveWindow, 2, 600, t1)).allowed).to.equal(false);
    // A pruned window starts afresh, as it would have anyway.
    expect(await limits.hit(oldWindow, 1, 60, t1)).to.deep.equal({ allowed: true, count: 1, retryAfterSeconds: 0 });
  });

  it("removes partner rate-limit windows that ended more than a minute ago; the current window keeps counting", async () => {
    const limited = await startStack({ gateway: true, webhookPollMs: 0, resourceRateLimits: { "kyc.read": 2 } });
    try {
      const partner = await createPartner(limited);
      const { userId } = await createUserFor(limited, partner);
      const token = await mintPartnerToken(limited, partner);
      const read = async () => (await api(limited, "GET", `/users/${userId}/kyc`, { token })).status;
      const key = `partner-resource:${partner.clientId}:kyc.read`;
      const windows = async () =>
        (await limited.core.db("rate_limit_windows").where({ key }).orderBy("window_start")).map((w: { window_start: Date; count: number }) => [
          w.window_start.getTime(),
          w.count,
        ]);
      const minuteOf = (t: Date) => Math.floor(t.getTime() / 60_000) * 60_000;

      const first = minuteOf(limited.clock());
      expect([await read(), await read(), await read()]).to.deep.equal([200, 200, 429]);
      expect(await windows()).to.deep.equal([[first, 3]]);

      // The next minute: a fresh window. The first ended less than a minute ago and stays.
      limited.clock.set(new Date(first + 60_000));
      expect(await read()).to.equal(200);
      await limited.core.prune();
      expect(await windows()).to.deep.equal([
        [first, 3],
        [first + 60_000, 1],
      ]);

      // Two minutes later both have ended more than a minute ago and go; the current
      // window, counted after the pass, still refuses its third read.
      limited.clock.set(new Date(first + 185_000));
      expect(await read()).to.equal(200);
      // (The test database is shared: other tests' old windows may go in the same pass.)
      expect((await limited.core.prune()).rate_limit_windows).to.be.at.least(2);
      expect(await windows()).to.deep.equal([[first + 180_000, 1]]);
      expect([await read(), await read()]).to.deep.equal([200, 429]);
      expect(await windows()).to.deep.equal([[first + 180_000, 3]]);
    } finally {
      await limited.close();
    }
  });

  it("a signed-out session still named by a live step-up challenge waits for that challenge", async () => {
    const user = await createUser(stack);
    const token = await ownerSession(stack, user.userId);
    const challenge = await stack.clients.grants.startSignIn({ sessionToken: token }); // step-up, live 10 minutes
    await stack.clients.grants.endSession({ sessionToken: token });
    await stack.core.prune();
    expect(await exists("web_sessions", { user_id: user.userId })).to.equal(true);
    expect(await exists("signin_challenges", { id: challenge.challengeId })).to.equal(true);
    stack.clock.advance(11 * 60_000);
    await stack.core.prune();
    expect(await exists("signin_challenges", { id: challenge.challengeId })).to.equal(false);
    expect(await exists("web_sessions", { user_id: user.userId })).to.equal(false);
  });

  it("a signed-out session stays ten minutes, so a repeated sign-out can still hand off, then goes", async () => {
    const user = await createUser(stack);
    const token = await ownerSession(stack, user.userId);
    await stack.clients.grants.endSession({ sessionToken: token });
    stack.clock.advance(9 * 60_000);
    await stack.core.prune();
    expect(await exists("web_sessions", { user_id: user.userId })).to.equal(true);
    expect((await stack.clients.grants.endSession({ sessionToken: token })).signoutHandoff).to.match(/^ey/);
    stack.clock.advance(2 * 60_000);
    await stack.core.prune();
    expect(await exists("web_sessions", { user_id: user.userId })).to.equal(false);
  });

  it("deletes in bounded batches: a pass stops after its batch limit and the next pass continues", async () => {
    const limits = createRateLimitStore(stack.core.db);
    const tag = randomBytes(4).toString("hex");
    const at = new Date(stack.clock().getTime() - HOUR);
    const left = async () => Number((await stack.core.db("rate_limit_logs").where("key", "like", `prune:${tag}:%`).count({ n: "*" }))[0]!.n);
    // Other suites' expired windows may sit in the shared database: drain them first.
    await stack.core.prune();
    for (let i = 0; i < 7; i++) await limits.hit(`prune:${tag}:b${i}`, 5, 60, at);
    const pruner = createPruner({ db: stack.core.db, clock: stack.clock, logger: stack.logs.logger, batchSize: 2, maxBatchesPerTable: 2 });
    expect((await pruner.runOnce()).rate_limit_logs).to.equal(4);
    expect(await left()).to.equal(3);
    expect((await pruner.runOnce()).rate_limit_logs).to.equal(3);
    expect(await left()).to.equal(0);
  });
});
