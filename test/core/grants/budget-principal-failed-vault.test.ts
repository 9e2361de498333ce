import { expect } from "chai";
import type { Code } from "@connectrpc/connect";
import { decodeJwt } from "jose";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createUser } from "../../support/agent-oauth.js";
import { ALL_AGENT_SCOPES, budgetParams, ownerSession } from "../../support/budgets.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";
import { requirePostgres } from "../../support/db.js";
import type { StepName } from "../../../core/budgets/records.js";

const actOf = (accessToken: string) => (decodeJwt(accessToken).act as { sub: string }).sub;

/**
 * A budget whose provisioning failed and whose agent principal was removed has no budget
 * principal: a grant on the vault it left behind acts as the ordinary per-client principal.
 */
describe("grants on a vault left by a failed budget act as the per-client principal", () => {
  let stack: TestStack;
  let failPolicy = false;
  let failVaultUndo = false;
  let hold: { reached: () => void; release: Promise<void> } | undefined;
  let onUndo: ((name: StepName) => void) | undefined;

  before(async () => {
    stack = await startStack({
      scrypt: { N: 1024, r: 8, p: 1 },
      budgetFaults: {
        step: (name, phase) => {
          if (phase === "compensate") onUndo?.(name);
          if (failPolicy && name === "policy" && phase === "run") return new Error("injected policy fault");
          if (failVaultUndo && name === "vault" && phase === "compensate") return new Error("injected vault undo fault");
          return undefined;
        },
        beforeStep: async (name) => {
          if (name !== "policy" || !hold) return;
          hold.reached();
          await hold.release;
        },
      },
    });
  });
  after(() => stack.close());
  afterEach(() => {
    failPolicy = false;
    failVaultUndo = false;
    hold = undefined;
    onUndo = undefined;
  });

  async function parentGrant() {
    const user = await createUser(stack);
    const parent = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true })).token!;
    return { user, parent };
  }

  it("after a partial cleanup (principal gone, vault kept), a grant on the vault names the per-client principal", async () => {
    const { user, parent } = await parentGrant();
    failPolicy = true;
    failVaultUndo = true;
    const params = budgetParams();
    await expectRefused(stack.clients.budgets.createBudget({ accessToken: parent.accessToken, ...params }), Reason.PROVISIONING_FAILED);
    const row = await stack.core.db("budgets").where({ parent_vault_id: user.vaultId, idempotency_key: params.idempotencyKey }).first();
    expect(row.status).to.equal("cleanup_pending");
    expect(await stack.core.db("agent_principals").where({ id: row.agent_principal_id })).to.have.length(0);
    expect(await stack.core.db("vaults").where({ id: row.vault_id })).to.have.length(1);

    const leftover = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: row.vault_id, scopes: ["accounts:read"] })).token!;
    expect(actOf(leftover.accessToken)).to.equal(actOf(parent.accessToken));
    expect(actOf(leftover.accessToken)).to.not.equal(row.agent_principal_id);
    const { agents } = await stack.clients.grants.listAgents({ sessionToken: await ownerSession(stack, user.userId) });
    expect(agents.map((a) => a.agentId)).to.deep.equal([actOf(parent.accessToken)]);
  });

  // Grants are fired at the moment the saga starts undoing its agent principal (or its
  // vault), and in the first round also just before the saga resumes, in waves, so they
  // land before, during and after each delete.
  for (const undone of ["agent_principal", "vault"] as const) {
    it(`grants racing a failing saga's undo of its ${undone} never fail with an internal error nor name a deleted principal (PostgreSQL)`, async function () {
      requirePostgres(this, "the race needs the saga and the grants on separate connections");
      for (let round = 0; round < 4; round++) {
        const { user, parent } = await parentGrant();
        let reached!: () => void;
        const atPolicy = new Promise<void>((r) => (reached = r));
        let release!: () => void;
        hold = { reached: () => reached(), release: new Promise<void>((r) => (release = r)) };
        failPolicy = true;
        const params = budgetParams();
        const saga = refusalOf(stack.clients.budgets.createBudget({ accessToken: parent.accessToken, ...params }));
        await atPolicy;
        // The vault and the principal exist; the policy step will fail and the saga undo them.
        const row = await stack.core.db("budgets").where({ parent_vault_id: user.vaultId, idempotency_key: params.idempotencyKey }).first();
        type Outcome = { ok: true; act: string } | { ok: false; code: Code; reason?: Reason };
        const attempts: Promise<Outcome>[] = [];
        const attempt = () =>
          stack.admin.grants.issueGrant({ userId: user.userId, vaultId: row.vault_id, scopes: ["accounts:read"] }).then(
            (r): Outcome => ({ ok: true, act: actOf(r.token!.accessToken) }),
            async (err): Promise<Outcome> => {
              const { code, detail } = await refusalOf(Promise.reject(err));
              return { ok: false, code, reason: detail?.reason };
            },
          );
        let fired = false;
        const waves = new Promise<void>((done) => {
          onUndo = (name) => {
            if (name !== undone || fired) return;
            fired = true;
            for (let i = 0; i < 4; i++) attempts.push(attempt());
            let wave = 0;
            const next = () => {
              for (let i = 0; i < 4; i++) attempts.push(attempt());
              if (++wave < 4) setTimeout(next, round);
              else done();
            };
            setTimeout(next, round);
          };
        });
        // In the first round some grants are already under way when the saga resumes.
        if (round === 0) for (let i = 0; i < 4; i++) attempts.push(attempt());
        release();
        const failed = await saga;
        expect(failed.detail?.reason).to.equal(Reason.PROVISIONING_FAILED);
        await waves;
        const outcomes = await Promise.all(attempts);
        for (const o of outcomes) {
          if (o.ok) expect([row.agent_principal_id, actOf(parent.accessToken)]).to.include(o.act);
          else expect(o.reason, JSON.stringify(o)).to.equal(Reason.INVALID_TARGET);
        }
        // Whatever the interleaving, every grant's principal exists, and the budget reports
        // as remaining exactly what its grants kept from being deleted.
        const grants = await stack.core.db("grants").where({ vault_id: row.vault_id });
        expect(grants).to.have.length(outcomes.filter((o) => o.ok).length);
        for (const id of new Set(grants.map((g: { agent_principal_id: string }) => g.agent_principal_id))) {
          expect(await stack.core.db("agent_principals").where({ id })).to.have.length(1);
        }
        const after = await stack.core.db("budgets").where({ id: row.id }).first();
        const principalLeft = (await stack.core.db("agent_principals").where({ id: row.agent_principal_id })).length === 1;
        const vaultLeft = (await stack.core.db("vaults").where({ id: row.vault_id })).length === 1;
        expect(after.status).to.equal(principalLeft || vaultLeft ? "cleanup_pending" : "failed");
        if (grants.length > 0) expect(vaultLeft).to.equal(true);
        if (grants.some((g: { agent_principal_id: string }) => g.agent_principal_id === row.agent_principal_id)) expect(principalLeft).to.equal(true);
      }
    });
  }
});
