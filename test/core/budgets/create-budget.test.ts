import { expect } from "chai";
import { Code } from "@connectrpc/connect";
import { BudgetStatus } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import type { StepName } from "../../../core/budgets/records.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { budgetParams, createOwner, futureTimestamp, grantFor, ownerSession, type TestOwner } from "../../support/budgets.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";

describe("BudgetsService.CreateBudget", () => {
  let stack: TestStack;
  let failing: { name: StepName; phase: "run" | "compensate" }[] = [];
  let hold: ((name: StepName) => Promise<void>) | undefined;
  let owner: TestOwner;

  before(async () => {
    stack = await startStack({
      budgetFaults: {
        step: (name, phase) => (failing.some((f) => f.name === name && f.phase === phase) ? new Error(`injected ${phase} fault in ${name}`) : undefined),
        beforeStep: (name) => hold?.(name) ?? Promise.resolve(),
      },
    });
  });
  after(() => stack.close());
  beforeEach(async () => {
    failing = [];
    hold = undefined;
    owner = await createOwner(stack);
  });

  const rows = async (vaultId: string, agentPrincipalId: string) => {
    const db = stack.core.db;
    return {
      vault: await db("vaults").where({ id: vaultId }).first(),
      agent: await db("agent_principals").where({ id: agentPrincipalId }).first(),
      policy: await db("vault_policies").where({ vault_id: vaultId }).first(),
    };
  };

  it("provisions a draft budget without step-up: child principal, child vault, draft policy", async () => {
    const res = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
    const b = res.budget!;
    expect(b.status).to.equal(BudgetStatus.DRAFT);
    expect(b.policyVersion).to.equal(0n);
    expect(b.agentPrincipalId).to.match(/^[0-9a-f-]{36}$/);
    expect(b.vaultId).to.match(/^[0-9a-f-]{36}$/);
    const r = await rows(b.vaultId, b.agentPrincipalId);
    expect(r.vault.parent_vault_id).to.equal(owner.vaultId);
    expect(r.vault.owner_user_id).to.equal(owner.userId);
    expect(r.agent.parent_agent_id).to.equal(owner.agentPrincipalId);
    expect(r.agent.vault_id).to.equal(b.vaultId);
    expect(r.policy.status).to.equal("draft");
    expect(r.policy.chain_allowlist).to.deep.equal(["base", "eth"]);
    const audit = await stack.core.db("audit_records").where({ actor: `agent:${owner.agentPrincipalId}`, action: "agent.budget.create" });
    expect(audit.map((a) => a.outcome)).to.deep.equal(["success"]);
  });

  it("is active at once (policy_version 1) with a fresh step-up on the grant, draft when it is older than 10 minutes", async () => {
    const fresh = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner, { stepUp: true }), ...budgetParams() });
    expect(fresh.budget!.status).to.equal(BudgetStatus.ACTIVE);
    expect(fresh.budget!.policyVersion).to.equal(1n);
    expect((await rows(fresh.budget!.vaultId, fresh.budget!.agentPrincipalId)).policy.status).to.equal("active");

    const stale = new Date(stack.clock().getTime() - 601_000);
    const old = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner, { stepUp: true, authTime: stale }), ...budgetParams() });
    expect(old.budget!.status).to.equal(BudgetStatus.DRAFT);
  });

  it("replays the same key with the same ids and the current status; other params are an idempotency conflict", async () => {
    const params = budgetParams({ timeWindowEnd: futureTimestamp(stack, 86_400_000) });
    const first = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params });
    // A replay under a superseded grant (new grant id) of the same agent on the same vault.
    const again = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params, chainAllowlist: ["eth", "base", "eth"] });
    expect(again.budget!.agentPrincipalId).to.equal(first.budget!.agentPrincipalId);
    expect(again.budget!.vaultId).to.equal(first.budget!.vaultId);
    expect(again.budget!.createdAt).to.deep.equal(first.budget!.createdAt);

    // Dashboard activation after step-up, then the replay reports the current status.
    await stack.clients.budgets.activateBudget({
      sessionToken: await ownerSession(stack, owner.userId, { stepUp: true }),
      agentPrincipalId: first.budget!.agentPrincipalId,
    });
    const after = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params });
    expect(after.budget!.status).to.equal(BudgetStatus.ACTIVE);
    expect(after.budget!.policyVersion).to.equal(1n);

    const conflict = await expectRefused(
      stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params, displayName: "Other" }),
      Reason.IDEMPOTENCY_CONFLICT,
    );
    expect(conflict.code).to.equal(Code.AlreadyExists);
  });

  it("needs the agent:budget:create scope; a superset is accepted", async () => {
    const denied = await refusalOf(
      stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner, { scopes: ["payments:initiate", "accounts:read"] }), ...budgetParams() }),
    );
    expect(denied.detail?.reason).to.equal(Reason.INSUFFICIENT_SCOPE);
    const ok = await stack.clients.budgets.createBudget({
      accessToken: await grantFor(stack, owner, { scopes: ["agent:budget:create", "x:other"] }),
      ...budgetParams(),
    });
    expect(ok.budget!.status).to.equal(BudgetStatus.DRAFT);
  });

  it("refuses invalid parameters, including a time_window_end in the past", async () => {
    const cases: Record<string, unknown>[] = [
      { purpose: "holiday" },
      { displayName: "" },
      { displayName: "x".repeat(101) },
      { chainAllowlist: [] },
      { chainAllowlist: ["btc"] },
      { idempotencyKey: "short" },
      { idempotencyKey: "k".repeat(129) },
      { amountCapCentsPerTx: 9007199254740992n },
      { timeWindowEnd: futureTimestamp(stack, -1000) },
      // After the year 9999 (a Timestamp's range; beyond a Date's too): refused, not failed in provisioning or core.
      { timeWindowEnd: { seconds: 253402300800n, nanos: 0 } },
      { timeWindowEnd: { seconds: 6n * 10n ** 12n, nanos: 0 } },
      { timeWindowEnd: { seconds: 10n ** 15n, nanos: 0 } },
    ];
    for (const c of cases) {
      const r = await refusalOf(stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams(c) }));
      expect(
        r.detail?.reason,
        JSON.stringify(c, (_k, v) => (typeof v === "bigint" ? String(v) : v)),
      ).to.equal(Reason.INVALID_REQUEST);
    }
    const boundary = await stack.clients.budgets.createBudget({
      accessToken: await grantFor(stack, owner),
      ...budgetParams({
        displayName: "x".repeat(100),
        amountCapCentsPerTx: 9007199254740991n,
        amountCapCentsPerDay: 0n,
        timeWindowEnd: { seconds: 253402300799n, nanos: 999_000_000 },
      }),
    });
    expect(boundary.budget!.status).to.equal(BudgetStatus.DRAFT);
  });

  for (const step of ["vault", "agent_principal", "policy"] as const) {
    it(`a failing ${step} step compensates the earlier steps and reports complete cleanup; the same key then completes`, async () => {
      const params = budgetParams();
      failing = [{ name: step, phase: "run" }];
      const r = await expectRefused(stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params }), Reason.PROVISIONING_FAILED);
      expect(r.code).to.equal(Code.Internal);
      const p = r.detail!.provisioning!;
      const order = ["vault", "agent_principal", "policy"];
      const at = order.indexOf(step);
      expect(p.steps.map((s) => [s.name, s.state])).to.deep.equal(order.map((name, i) => [name, i < at ? "compensated" : i === at ? "failed" : "pending"]));
      expect(p.cleanup).to.equal("complete");
      expect(p.remaining).to.deep.equal([]);
      const budget = await stack.core.db("budgets").where({ parent_vault_id: owner.vaultId, idempotency_key: params.idempotencyKey }).first();
      expect(budget.status).to.equal("failed");
      const left = await rows(budget.vault_id, budget.agent_principal_id);
      expect([left.vault, left.agent, left.policy]).to.deep.equal([undefined, undefined, undefined]);
      expect(await stack.core.db("vault_provisioning_claims").where({ vault_id: owner.vaultId })).to.deep.equal([]);

      failing = [];
      const retried = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params });
      expect(retried.budget!.vaultId).to.equal(budget.vault_id);
      expect(retried.budget!.agentPrincipalId).to.equal(budget.agent_principal_id);
      expect(retried.budget!.status).to.equal(BudgetStatus.DRAFT);
    });
  }

  it("reports partial cleanup when compensation fails; the reaper finishes it and a retry completes", async () => {
    const params = budgetParams();
    failing = [
      { name: "policy", phase: "run" },
      { name: "vault", phase: "compensate" },
    ];
    const r = await refusalOf(stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params }));
    const p = r.detail!.provisioning!;
    expect(p.steps.map((s) => [s.name, s.state])).to.deep.equal([
      ["vault", "compensation_failed"],
      ["agent_principal", "compensated"],
      ["policy", "failed"],
    ]);
    expect(p.cleanup).to.equal("partial");
    expect(p.remaining).to.deep.equal(["vault"]);
    const budget = await stack.core.db("budgets").where({ parent_vault_id: owner.vaultId, idempotency_key: params.idempotencyKey }).first();
    expect(budget.status).to.equal("cleanup_pending");
    expect((await rows(budget.vault_id, budget.agent_principal_id)).vault).to.not.equal(undefined);

    // The reaper cannot finish while the fault persists, and leaves the record for the next pass.
    await stack.core.reapProvisioning();
    expect((await stack.core.db("budgets").where({ id: budget.id }).first()).status).to.equal("cleanup_pending");

    failing = [];
    // The operator's RPC runs the same pass (admin only).
    await expectRefused(stack.clients.budgets.reapProvisioning({}), Reason.ADMIN_UNAUTHENTICATED);
    expect((await stack.admin.budgets.reapProvisioning({})).cleaned).to.be.greaterThan(0);
    const reaped = await stack.core.db("budgets").where({ id: budget.id }).first();
    expect(reaped.status).to.equal("failed");
    expect(reaped.remaining).to.deep.equal([]);
    expect((await rows(budget.vault_id, budget.agent_principal_id)).vault).to.equal(undefined);

    const retried = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params });
    expect(retried.budget!.vaultId).to.equal(budget.vault_id);
  });

  it("a retry of a key whose cleanup is still partial completes with the leftovers reused", async () => {
    const params = budgetParams();
    failing = [
      { name: "policy", phase: "run" },
      { name: "vault", phase: "compensate" },
    ];
    await refusalOf(stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params }));
    failing = [];
    const retried = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params });
    expect(retried.budget!.status).to.equal(BudgetStatus.DRAFT);
    const r = await rows(retried.budget!.vaultId, retried.budget!.agentPrincipalId);
    expect([Boolean(r.vault), Boolean(r.agent), Boolean(r.policy)]).to.deep.equal([true, true, true]);
  });

  it("the reaper compensates a saga abandoned mid-flight (crashed process) and releases the parent vault", async () => {
    const params = budgetParams();
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    hold = (name) => (name === "policy" ? held : Promise.resolve());
    const pending = stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params });
    // Wait until the saga reaches the held step.
    for (let i = 0; i < 200; i++) {
      const b = await stack.core.db("budgets").where({ parent_vault_id: owner.vaultId, idempotency_key: params.idempotencyKey }).first();
      if (b && (b.steps as { state: string }[]).filter((s) => s.state === "done").length === 2) break;
      await new Promise((r) => setImmediate(r));
    }
    stack.clock.advance(301_000);
    expect(await stack.core.reapProvisioning()).to.equal(1);
    expect(await stack.core.db("vault_provisioning_claims").where({ vault_id: owner.vaultId })).to.deep.equal([]);
    hold = undefined;
    release();
    // The abandoned call wakes up fenced: it writes nothing and says so; a retry with the key completes.
    await expectRefused(pending, Reason.VAULT_CONTENTION);
    const after = await stack.core.db("budgets").where({ parent_vault_id: owner.vaultId, idempotency_key: params.idempotencyKey }).first();
    expect(after.status).to.equal("failed");
    expect(await stack.core.db("vaults").where({ id: after.vault_id })).to.deep.equal([]);
    const retried = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...params });
    expect(retried.budget!.status).to.equal(BudgetStatus.DRAFT);
  });

  it("a parent vault in another provisioning sequence gives vault contention; it clears when that one ends", async () => {
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let reached!: () => void;
    const atPolicy = new Promise<void>((r) => (reached = r));
    hold = (name) => {
      if (name !== "policy") return Promise.resolve();
      reached();
      return held;
    };
    const first = stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
    await atPolicy;
    hold = undefined;
    const second = budgetParams();
    const contended = await expectRefused(
      stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...second }),
      Reason.VAULT_CONTENTION,
    );
    expect(contended.code).to.equal(Code.Aborted);
    // Another user's vault is not affected.
    const other = await createOwner(stack);
    expect((await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, other), ...budgetParams() })).budget!.status).to.equal(
      BudgetStatus.DRAFT,
    );
    release();
    expect((await first).budget!.status).to.equal(BudgetStatus.DRAFT);
    expect((await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...second })).budget!.status).to.equal(BudgetStatus.DRAFT);
  });

  it("limits provisioning starts to 10 per minute per parent vault (replays do not count)", async () => {
    const first = budgetParams();
    await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...first });
    for (let i = 0; i < 9; i++) await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
    // A replay is not a start.
    await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...first });
    const limited = await expectRefused(
      stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() }),
      Reason.RATE_LIMITED,
    );
    expect(limited.detail?.retryAfterSeconds).to.equal(60);
    const other = await createOwner(stack);
    await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, other), ...budgetParams() });
    stack.clock.advance(60_001);
    await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
  });

  describe("ActivateBudget", () => {
    it("needs the owner and a fresh step-up; activation is idempotent", async () => {
      const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
      // The step-up is the session's own: core reads it, the caller cannot claim one.
      const session = await ownerSession(stack, owner.userId);
      await expectRefused(stack.clients.budgets.activateBudget({ sessionToken: session, agentPrincipalId: budget!.agentPrincipalId }), Reason.ACCESS_DENIED);
      const stepped = await ownerSession(stack, owner.userId, { stepUp: true });
      stack.clock.advance(601_000);
      await expectRefused(stack.clients.budgets.activateBudget({ sessionToken: stepped, agentPrincipalId: budget!.agentPrincipalId }), Reason.ACCESS_DENIED);
      for (const forged of ["", "vgs_forged", `${stepped.slice(0, -2)}xx`]) {
        await expectRefused(stack.clients.budgets.activateBudget({ sessionToken: forged, agentPrincipalId: budget!.agentPrincipalId }), Reason.INVALID_TOKEN);
      }
      const other = await createOwner(stack);
      const foreign = await refusalOf(
        stack.clients.budgets.activateBudget({
          sessionToken: await ownerSession(stack, other.userId, { stepUp: true }),
          agentPrincipalId: budget!.agentPrincipalId,
        }),
      );
      expect(foreign.detail?.reason).to.equal(Reason.NOT_FOUND);
      const sessionToken = await ownerSession(stack, owner.userId, { stepUp: true });
      const pending = await stack.clients.budgets.listPendingApprovals({ sessionToken });
      expect(pending.draftBudgets.map((b) => b.agentPrincipalId)).to.include(budget!.agentPrincipalId);
      // The review page shows what would be installed, in the vault's currency.
      const limits = pending.draftBudgets.find((b) => b.agentPrincipalId === budget!.agentPrincipalId)!.limits!;
      expect([
        limits.purpose,
        limits.amountCapCentsPerTx,
        limits.amountCapCentsPerDay,
        limits.amountCapCentsLifetime,
        limits.stepUpAmountCents,
        limits.chainAllowlist,
        limits.currency,
      ]).to.deep.equal(["trip", 10_000n, 20_000n, 50_000n, 5_000n, ["base", "eth"], "USD"]);
      // A malformed id is refused like an unknown one.
      for (const agentPrincipalId of ["not-a-uuid", ""]) {
        await expectRefused(stack.clients.budgets.activateBudget({ sessionToken, agentPrincipalId }), Reason.NOT_FOUND);
      }
      const activated = await stack.clients.budgets.activateBudget({ sessionToken, agentPrincipalId: budget!.agentPrincipalId });
      expect(activated.budget!.status).to.equal(BudgetStatus.ACTIVE);
      expect(activated.budget!.policyVersion).to.equal(1n);
      const again = await stack.clients.budgets.activateBudget({ sessionToken, agentPrincipalId: budget!.agentPrincipalId });
      expect(again.budget!.status).to.equal(BudgetStatus.ACTIVE);
      expect((await stack.clients.budgets.listPendingApprovals({ sessionToken })).draftBudgets).to.deep.equal([]);
    });
  });
});
