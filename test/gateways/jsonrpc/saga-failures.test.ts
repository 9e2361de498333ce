import { requirePostgres } from "../../support/db.js";
import { expect } from "chai";
import { startMcpStack, postRpc, type McpStack } from "../../support/mcp.js";
import { createOwner, grantFor, type TestOwner } from "../../support/budgets.js";
import type { StepName } from "../../../core/budgets/records.js";

/**
 * Every failure point of agent.budget.create after the vault is claimed answers spec
 * 7.1's -32603 with the provisioning report, and leaves the vault free at once: the next
 * create on it is not -32005, and a retry of the key completes. Over JSON-RPC/HTTP.
 */
describe("agent.budget.create failures release the vault (JSON-RPC)", () => {
  let stack: McpStack;
  let failStep: StepName | undefined;
  let failAudit = false;
  let failCommit = false;
  let auditDown = false;
  let seq = 0;

  before(async () => {
    stack = await startMcpStack({
      budgetFaults: {
        step: (name, phase) => (phase === "run" && name === failStep ? new Error("injected step fault") : undefined),
        finalAudit: () => (failAudit ? new Error("injected audit fault") : undefined),
        finalCommit: () => (failCommit ? new Error("injected commit fault") : undefined),
      },
      auditFaults: { appendFault: () => (auditDown ? new Error("injected audit store fault") : undefined) },
    });
  });
  after(() => stack.close());
  beforeEach(() => {
    failStep = undefined;
    failAudit = false;
    failCommit = false;
    auditDown = false;
  });

  const key = () => `saga-${Date.now().toString(36)}-${++seq}-abcdef`;
  const args = (idempotency_key = key()) => ({
    purpose: "market-research",
    display_name: "Research agent",
    amount_cap_cents_per_tx: 10_000,
    chain_allowlist: ["base"],
    idempotency_key,
  });
  const create = (token: string, a: Record<string, unknown>) =>
    postRpc(`${stack.url}/mcp/treasury`, { jsonrpc: "2.0", id: 1, method: "agent.budget.create", params: a }, { authorization: `Bearer ${token}` });

  const cases: { label: string; arm: () => void; steps: [string, string][] }[] = [
    {
      label: "the vault step",
      arm: () => (failStep = "vault"),
      steps: [
        ["vault", "failed"],
        ["agent_principal", "pending"],
        ["policy", "pending"],
      ],
    },
    {
      label: "the agent_principal step",
      arm: () => (failStep = "agent_principal"),
      steps: [
        ["vault", "compensated"],
        ["agent_principal", "failed"],
        ["policy", "pending"],
      ],
    },
    {
      label: "the policy step",
      arm: () => (failStep = "policy"),
      steps: [
        ["vault", "compensated"],
        ["agent_principal", "compensated"],
        ["policy", "failed"],
      ],
    },
    ...(
      [
        ["the final audit row", () => (failAudit = true)],
        ["the final commit", () => (failCommit = true)],
        ["the audit store (every append fails)", () => (auditDown = true)],
      ] as const
    ).map(([label, arm]) => ({
      label,
      arm,
      steps: [
        ["vault", "compensated"],
        ["agent_principal", "compensated"],
        ["policy", "compensated"],
        ["finalize", "failed"],
      ] as [string, string][],
    })),
  ];

  for (const c of cases) {
    it(`a failure of ${c.label} answers -32603 with provisioning and cleanup; the vault is free at once`, async () => {
      const owner: TestOwner = await createOwner(stack);
      const token = await grantFor(stack, owner);
      const a = args();
      c.arm();
      const res = await create(token, a);
      expect(res.status).to.equal(200);
      expect(res.json!.error, res.text).to.deep.equal({
        code: -32603,
        message: "Internal error",
        data: {
          reason_id: "provisioning_failed",
          provisioning: c.steps.map(([step, state]) => ({ step, state })),
          cleanup: "complete",
          remaining: [],
          request_id: res.headers.get("x-request-id"),
        },
      });
      expect(res.text).to.not.include("injected");
      const db = stack.core.db;
      const budget = await db("budgets").where({ parent_vault_id: owner.vaultId, idempotency_key: a.idempotency_key }).first();
      expect(budget.status).to.equal("failed");
      expect(await db("vault_provisioning_claims").where({ vault_id: owner.vaultId })).to.deep.equal([]);
      expect(await db("vaults").where({ id: budget.vault_id })).to.deep.equal([]);
      expect(await db("agent_principals").where({ id: budget.agent_principal_id })).to.deep.equal([]);

      // Faults cleared: the next create on the vault runs now (no -32005), and the key completes.
      auditDown = failAudit = failCommit = false;
      failStep = undefined;
      const other = await create(token, args());
      expect(other.json!.result?.status, other.text).to.equal("draft");
      const retried = await create(token, a);
      expect(retried.json!.result?.status, retried.text).to.equal("draft");
      expect(retried.json!.result.vault_id).to.equal(budget.vault_id);
    });
  }

  it("the vault is free for the next create while the audit store is still failing (no -32005)", async () => {
    const owner = await createOwner(stack);
    const token = await grantFor(stack, owner);
    auditDown = true;
    for (let i = 0; i < 3; i++) {
      const res = await create(token, args());
      expect(res.json!.error?.code, res.text).to.equal(-32603);
      expect(res.json!.error.data.reason_id).to.equal("provisioning_failed");
    }
    expect(await stack.core.db("vault_provisioning_claims").where({ vault_id: owner.vaultId })).to.deep.equal([]);
  });

  it("concurrent creates on one vault with a failing final commit: each answers -32603 or -32005, and the vault ends free (Postgres)", async function () {
    // PGlite runs one connection: concurrent sagas cannot interleave there.
    requirePostgres(this, "concurrent sagas need several connections");
    const owner = await createOwner(stack);
    const token = await grantFor(stack, owner);
    failCommit = true;
    const answers = await Promise.all(Array.from({ length: 6 }, () => create(token, args())));
    for (const r of answers) expect([-32603, -32005]).to.include(r.json!.error?.code);
    expect(answers.some((r) => r.json!.error.code === -32603)).to.equal(true);
    expect(await stack.core.db("vault_provisioning_claims").where({ vault_id: owner.vaultId })).to.deep.equal([]);
    failCommit = false;
    expect((await create(token, args())).json!.result?.status).to.equal("draft");
  });

  it("a hostile caller cannot use a failed saga: a revoked grant's retry is refused and claims nothing", async () => {
    const owner = await createOwner(stack);
    const token = await grantFor(stack, owner);
    const a = args();
    failCommit = true;
    expect((await create(token, a)).json!.error.code).to.equal(-32603);
    failCommit = false;
    await stack.core.db("grants").where({ vault_id: owner.vaultId }).update({ state: "revoked" });
    expect((await create(token, a)).json!.error.code).to.equal(-32001);
    expect(await stack.core.db("vault_provisioning_claims").where({ vault_id: owner.vaultId })).to.deep.equal([]);
  });
});
