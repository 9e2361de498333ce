import { expect } from "chai";
import type { Code } from "@connectrpc/connect";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createUser, pkce } from "../../support/agent-oauth.js";
import { ALL_AGENT_SCOPES, budgetParams, ownerSession } from "../../support/budgets.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";
import { requirePostgres } from "../../support/db.js";
import type { StepName } from "../../../core/budgets/records.js";

/**
 * A budget whose provisioning failed or is still under way is no budget its owner can use:
 * no grant binds the vault it left behind, so nothing keeps its cleanup from removing it.
 */
describe("grants on a vault of a budget whose creation did not complete", () => {
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

  it("after a partial cleanup (principal gone, vault kept), no grant binds the vault and the consent page does not offer it", async () => {
    const { user, parent } = await parentGrant();
    failPolicy = true;
    failVaultUndo = true;
    const params = budgetParams();
    await expectRefused(stack.clients.budgets.createBudget({ accessToken: parent.accessToken, ...params }), Reason.PROVISIONING_FAILED);
    const row = await stack.core.db("budgets").where({ parent_vault_id: user.vaultId, idempotency_key: params.idempotencyKey }).first();
    expect(row.status).to.equal("cleanup_pending");
    expect(await stack.core.db("agent_principals").where({ id: row.agent_principal_id })).to.have.length(0);
    expect(await stack.core.db("vaults").where({ id: row.vault_id })).to.have.length(1);

    const refused = await expectRefused(
      stack.admin.grants.issueGrant({ userId: user.userId, vaultId: row.vault_id, scopes: ["accounts:read"] }),
      Reason.INVALID_TARGET,
    );
    expect(refused.message).to.equal("the vault belongs to a budget whose creation did not complete");
    expect(await stack.core.db("grants").where({ vault_id: row.vault_id })).to.deep.equal([]);

    const { client } = await stack.clients.grants.registerClient({
      clientName: "Late agent",
      redirectUris: ["http://127.0.0.1:9/callback"],
      grantTypes: ["authorization_code"],
      responseTypes: ["code"],
      tokenEndpointAuthMethod: "client_secret_post",
      scope: "accounts:read",
    });
    const request = {
      clientId: client!.clientId,
      redirectUri: "http://127.0.0.1:9/callback",
      scope: "accounts:read",
      codeChallenge: pkce().challenge,
      codeChallengeMethod: "S256",
    };
    const sessionToken = await ownerSession(stack, user.userId, { stepUp: true });
    const offered = await stack.clients.grants.checkAuthorization({ ...request, resources: [], sessionToken });
    expect(offered.vaults.map((v) => v.vaultId)).to.deep.equal([user.vaultId]);
    await expectRefused(
      stack.clients.grants.approveAuthorization({ request: { ...request, resources: [`urn:vaultgate:vault:${row.vault_id}`] }, sessionToken }),
      Reason.INVALID_TARGET,
    );
    expect(await stack.core.db("authorization_codes").where({ vault_id: row.vault_id })).to.deep.equal([]);
  });

  // Grants are fired at the moment the saga starts undoing its agent principal (or its
  // vault), and in the first round also just before the saga resumes, in waves, so they
  // land before, during and after each delete.
  for (const undone of ["agent_principal", "vault"] as const) {
    it(`grants racing a failing saga's undo of its ${undone} are all refused as invalid_target, never an internal error (PostgreSQL)`, async function () {
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
        type Outcome = { ok: true } | { ok: false; code: Code; reason?: Reason };
        const attempts: Promise<Outcome>[] = [];
        const attempt = () =>
          stack.admin.grants.issueGrant({ userId: user.userId, vaultId: row.vault_id, scopes: ["accounts:read"] }).then(
            (): Outcome => ({ ok: true }),
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
        for (const o of outcomes) expect(o.ok ? o : o.reason, JSON.stringify(o)).to.equal(Reason.INVALID_TARGET);
        // Nothing held the vault or the principal, so the undo removed both.
        expect(await stack.core.db("grants").where({ vault_id: row.vault_id })).to.deep.equal([]);
        expect((await stack.core.db("budgets").where({ id: row.id }).first()).status).to.equal("failed");
        expect(await stack.core.db("agent_principals").where({ id: row.agent_principal_id })).to.deep.equal([]);
        expect(await stack.core.db("vaults").where({ id: row.vault_id })).to.deep.equal([]);
      }
    });
  }
});
