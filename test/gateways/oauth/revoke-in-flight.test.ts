import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { startStack, type TestStack } from "../../support/stack.js";
import { codeExchangeForm, consentCode, createJar, createUser, postForm, vaultUrn } from "../../support/agent-oauth.js";
import { budgetParams, grantFor, stackRpc } from "../../support/budgets.js";
import { expectJsonRpcError, expectOAuthError, reasonOf } from "../../support/refusals.js";
import { requirePostgres } from "../../support/db.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { balanceOf, expectLedgerBalanced } from "../../support/budget-life.js";

const SCOPE = "agent:budget:create payments:initiate";

/** A form POST answered as the raw response, for expectOAuthError. */
const postRaw = (url: string, form: Record<string, string>) =>
  fetch(url, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: new URLSearchParams(form).toString() });

/** A client's own revocation, a reused refresh token and a replayed code end what the lineage left waiting for the owner. */
describe("agent OAuth: every lineage revocation declines its open payments and drafts", () => {
  let stack: TestStack;
  before(async function () {
    this.timeout(120_000);
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 }, provisioningLimitPerMinute: 1000 });
  });
  after(() => stack.close());

  /** A user with a funded budget (step-up above 5,000) and `n` OAuth lineages on it, each with a payment and a draft waiting. */
  async function lineages(n: number) {
    const user = await createUser(stack);
    const root = { ...user, agentPrincipalId: "" };
    root.agentPrincipalId = (
      await stack.core
        .db("agent_principals")
        .insert({ id: randomUUID(), user_id: user.userId, vault_id: user.vaultId, display_name: "root", created_at: stack.clock() })
        .returning("id")
    )[0].id;
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, root, { stepUp: true }), ...budgetParams() });
    await stack.admin.budgets.fundVault({ vaultId: budget!.vaultId, amountCents: 100_000n });
    const jar = createJar(stack.url);
    const out = [];
    for (let i = 0; i < n; i++) {
      const c = await consentCode(stack, { email: user.email, vaultId: budget!.vaultId }, jar, {
        scope: SCOPE,
        resource: [vaultUrn(budget!.vaultId)],
        register: { scope: SCOPE },
      });
      const token = (await postForm(`${stack.url}/oauth2/token`, codeExchangeForm(c))).body as Record<string, string>;
      out.push({ ...c, token });
    }
    // The consent's step-up is stale by now: what these lineages ask for waits for the owner.
    stack.clock.advance(11 * 60_000);
    const rpc = stackRpc(stack);
    const waiting = [];
    for (const l of out) {
      const pay = await rpc("/mcp/write", l.token.access_token!, "payments.initiate", {
        counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
        amount_cents: 7_000,
        currency: "USD",
        idempotency_key: `p-${randomUUID()}`,
      });
      expect(pay.json!.result.kind).to.equal("pending_step_up");
      const draft = await rpc("/mcp/treasury", l.token.access_token!, "agent.budget.create", {
        purpose: "trip",
        display_name: "Sub",
        chain_allowlist: ["base"],
        idempotency_key: `b-${randomUUID()}`,
      });
      expect(draft.json!.result.status).to.equal("draft");
      waiting.push({ ...l, paymentId: pay.json!.result.payment_id as string, draftVault: draft.json!.result.vault_id as string });
    }
    return { user, budgetVault: budget!.vaultId, waiting };
  }
  const paymentStatus = async (id: string) => (await stack.core.db("agent_payments").where({ id }).first("status")).status as string;
  const draftStatus = async (vaultId: string) => (await stack.core.db("budgets").where({ vault_id: vaultId }).first("status")).status as string;
  const states = async (w: { paymentId: string; draftVault: string }) => [await paymentStatus(w.paymentId), await draftStatus(w.draftVault)];

  it("POST /oauth2/revoke by the client ends its lineage's payment and draft; another client's attempt and the other lineage are untouched", async () => {
    const { waiting, budgetVault } = await lineages(2);
    const [mine, theirs] = waiting as [(typeof waiting)[0], (typeof waiting)[0]];
    const hostile = await postRaw(`${stack.url}/oauth2/revoke`, {
      token: mine.token.refresh_token!,
      client_id: theirs.client.client_id,
      client_secret: theirs.client.client_secret,
    });
    await expectOAuthError(hostile, 400, "invalid_request");
    expect(await states(mine)).to.deep.equal(["pending_step_up", "draft"]);
    const res = await postForm(`${stack.url}/oauth2/revoke`, {
      token: mine.token.access_token!,
      client_id: mine.client.client_id,
      client_secret: mine.client.client_secret,
    });
    expect(res.status).to.equal(200);
    expect(await states(mine)).to.deep.equal(["declined", "declined"]);
    expect(await states(theirs)).to.deep.equal(["pending_step_up", "draft"]);
    expect(await balanceOf(stack, budgetVault)).to.equal(100_000);
    const audit = await stack.core
      .db("audit_records")
      .where({ action: "agent.budget.decline", reason: "grant_revoked", actor: `client:${mine.client.client_id}` });
    expect(audit).to.have.length(1);
  });

  it("a reused refresh token and a replayed code each end their lineage's payment and draft", async () => {
    const { waiting } = await lineages(3);
    const [refreshed, replayed, other] = waiting as [(typeof waiting)[0], (typeof waiting)[0], (typeof waiting)[0]];
    const refresh = (l: typeof refreshed) =>
      postRaw(`${stack.url}/oauth2/token`, {
        grant_type: "refresh_token",
        refresh_token: l.token.refresh_token!,
        client_id: l.client.client_id,
        client_secret: l.client.client_secret,
      });
    expect((await refresh(refreshed)).status).to.equal(200);
    // Past the grace window, the used token is a reuse: the lineage is revoked.
    stack.clock.advance(60_000);
    await expectOAuthError(await refresh(refreshed), 400, "invalid_grant");
    expect(await states(refreshed)).to.deep.equal(["declined", "declined"]);
    await expectOAuthError(await postRaw(`${stack.url}/oauth2/token`, codeExchangeForm(replayed)), 400, "invalid_grant");
    expect(await states(replayed)).to.deep.equal(["declined", "declined"]);
    expect(await states(other)).to.deep.equal(["pending_step_up", "draft"]);
    await expectLedgerBalanced(stack);
  });

  it("killSwitch.all over JSON-RPC ends every lineage's payment and draft; a stranger's killSwitch.all touches none", async () => {
    const mine = await lineages(2);
    const stranger = await lineages(1);
    const rpc = stackRpc(stack);
    const res = await rpc("/mcp/treasury", stranger.waiting[0]!.token.access_token!, "killSwitch.all", { reason: "hostile" });
    expect(res.json!.result.revoked).to.be.greaterThan(0);
    for (const w of mine.waiting) expect(await states(w)).to.deep.equal(["pending_step_up", "draft"]);
    await rpc("/mcp/treasury", mine.waiting[0]!.token.access_token!, "killSwitch.all", {});
    for (const w of mine.waiting) expect(await states(w)).to.deep.equal(["declined", "declined"]);
    // The killed agent's draft is gone for the owner too: its vault makes no new budget.
    const again = await rpc("/mcp/treasury", mine.waiting[1]!.token.access_token!, "agent.budget.create", {
      purpose: "trip",
      chain_allowlist: ["base"],
      idempotency_key: `b-${randomUUID()}`,
    });
    expectJsonRpcError(again, -32001, "invalid_token");
  });
  it("hostile agents paying and asking for drafts while their client revokes or reuses a refresh token: nothing of the lineage is left open (PostgreSQL only)", async function () {
    requirePostgres(this, "racing transactions need several connections");
    this.timeout(180_000);
    const outcomes: (Reason | "ok" | undefined)[] = [];
    for (let round = 0; round < 4; round++) {
      const { waiting, budgetVault, user } = await lineages(1);
      const l = waiting[0]!;
      const creds = { client_id: l.client.client_id, client_secret: l.client.client_secret };
      let accessToken = l.token.access_token!;
      let revoke: () => Promise<unknown>;
      if (round % 2 === 0) revoke = () => postForm(`${stack.url}/oauth2/revoke`, { token: l.token.refresh_token!, ...creds });
      else {
        const next = await postForm(`${stack.url}/oauth2/token`, { grant_type: "refresh_token", refresh_token: l.token.refresh_token!, ...creds });
        accessToken = String(next.body.access_token);
        stack.clock.advance(60_000);
        revoke = () => postForm(`${stack.url}/oauth2/token`, { grant_type: "refresh_token", refresh_token: l.token.refresh_token!, ...creds });
      }
      const calls: Promise<unknown>[] = [
        ...Array.from({ length: 8 }, () =>
          stack.clients.budgets.initiatePayment({
            accessToken,
            payment: {
              counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
              amountCents: 7_000n,
              currency: "USD",
              idempotencyKey: `p-${randomUUID()}`,
            },
          }),
        ),
        ...Array.from({ length: 4 }, () => stack.clients.budgets.createBudget({ accessToken, ...budgetParams() })),
      ];
      calls.splice(round * 3, 0, revoke());
      for (const r of await Promise.allSettled(calls)) outcomes.push(r.status === "fulfilled" ? "ok" : reasonOf(r.reason));
      const lineage = stack.core.db("grants").select(stack.core.db.raw("id::text")).where({ user_id: user.userId, client_id: l.client.client_id });
      expect(await stack.core.db("grants").where({ user_id: user.userId, client_id: l.client.client_id }).whereNot({ state: "revoked" })).to.deep.equal([]);
      expect(await stack.core.db("agent_payments").whereIn("grant_id", lineage).whereIn("status", ["pending_step_up", "approved"])).to.deep.equal([]);
      expect(await stack.core.db("budgets").whereIn("grant_id", lineage).whereIn("status", ["draft", "provisioning"])).to.deep.equal([]);
      expect(await balanceOf(stack, budgetVault)).to.equal(100_000);
    }
    expect(outcomes, "no internal error").to.not.include(undefined);
    for (const r of new Set(outcomes.filter((x) => x !== "ok"))) expect([Reason.INVALID_TOKEN, Reason.VAULT_CONTENTION, Reason.POLICY_DENIED]).to.include(r);
    await expectLedgerBalanced(stack);
  });
});
