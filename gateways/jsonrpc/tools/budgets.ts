import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { BudgetStatus } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { parseDateTime } from "../date-time.js";
import { AMOUNT, CHAIN, DATE_TIME, DISPLAY_NAME, defineTool, iso, KEY, object, UTC_DATE_TIME, UUID, type Tool } from "./kit.js";

const opt = (v: number | undefined) => (v === undefined ? undefined : BigInt(v));

/** Budgets an agent makes under its grant's vault: create, fund, close, sweep. */
export const budgetTools: readonly Tool[] = [
  defineTool({
    name: "agent.budget.create",
    category: "treasury",
    scope: "agent:budget:create",
    auth: "bearer",
    title: "Create Agent Budget",
    description: "Provisions a child agent principal with its own vault under the grant's vault and a spending policy.",
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: true,
    inputSchema: object(
      {
        purpose: { type: "string", enum: ["ap", "treasury", "trip", "market-research", "payroll", "multi-chain-concierge", "custom"] },
        display_name: DISPLAY_NAME,
        amount_cap_cents_per_tx: AMOUNT,
        amount_cap_cents_per_day: AMOUNT,
        amount_cap_cents_lifetime: AMOUNT,
        step_up_amount_cents: AMOUNT,
        chain_allowlist: { type: "array", minItems: 1, items: CHAIN },
        time_window_end: DATE_TIME,
        idempotency_key: KEY,
      },
      ["purpose", "display_name", "chain_allowlist", "idempotency_key"],
    ),
    outputSchema: object(
      {
        agent_principal_id: UUID,
        vault_id: UUID,
        policy_version: AMOUNT,
        status: { type: "string", enum: ["draft", "active"] },
        created_at: UTC_DATE_TIME,
      },
      ["agent_principal_id", "vault_id", "policy_version", "status", "created_at"],
    ),
    async call(args, ctx) {
      const end = args.time_window_end === undefined ? undefined : parseDateTime(args.time_window_end);
      const { budget } = await ctx.clients.budgets.createBudget(
        {
          accessToken: ctx.accessToken,
          purpose: args.purpose,
          displayName: args.display_name,
          amountCapCentsPerTx: opt(args.amount_cap_cents_per_tx),
          amountCapCentsPerDay: opt(args.amount_cap_cents_per_day),
          amountCapCentsLifetime: opt(args.amount_cap_cents_lifetime),
          stepUpAmountCents: opt(args.step_up_amount_cents),
          chainAllowlist: args.chain_allowlist,
          timeWindowEnd: end ? timestampFromDate(end) : undefined,
          idempotencyKey: args.idempotency_key,
        },
        ctx.call,
      );
      return {
        agent_principal_id: budget!.agentPrincipalId,
        vault_id: budget!.vaultId,
        policy_version: Number(budget!.policyVersion),
        status: budget!.status === BudgetStatus.ACTIVE ? "active" : "draft",
        created_at: iso(budget!.createdAt),
      };
    },
  }),
  defineTool({
    name: "agent.budget.fund",
    category: "treasury",
    scope: "agent:budget:create",
    auth: "bearer",
    title: "Fund Agent Budget",
    description:
      "Moves amount_cents from the grant's vault into one of the budgets created under it (vault_id, as agent.budget.create answered it), as one ledger transfer. Refused beyond the grant vault's balance; an active budget only (a draft waits for its owner). Idempotent on idempotency_key: a replay moves nothing and says replayed.",
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object({ vault_id: UUID, amount_cents: { ...AMOUNT, minimum: 1 }, idempotency_key: KEY }, ["vault_id", "amount_cents", "idempotency_key"]),
    outputSchema: object(
      {
        transfer_id: UUID,
        vault_id: UUID,
        parent_vault_id: UUID,
        amount_cents: AMOUNT,
        currency: { type: "string" },
        balance_cents: AMOUNT,
        replayed: { type: "boolean" },
      },
      ["transfer_id", "vault_id", "parent_vault_id", "amount_cents", "currency", "balance_cents", "replayed"],
    ),
    async call(args, ctx) {
      const res = await ctx.clients.budgets.fundBudget(
        { accessToken: ctx.accessToken, vaultId: args.vault_id, amountCents: BigInt(args.amount_cents), idempotencyKey: args.idempotency_key },
        ctx.call,
      );
      return {
        transfer_id: res.transferId,
        vault_id: res.vaultId,
        parent_vault_id: res.parentVaultId,
        amount_cents: Number(res.amountCents),
        currency: res.currency,
        balance_cents: Number(res.balanceCents),
        replayed: res.replayed,
      };
    },
  }),
  defineTool({
    name: "agent.budget.revoke",
    category: "treasury",
    scope: "agent:budget:create",
    auth: "bearer",
    title: "Close Agent Budget",
    description:
      "Closes one of the budgets created under the grant's vault, and every budget its agent made in turn: revokes every grant on their vaults, declines their payments still waiting for approval, freezes their policies so nothing more is paid, and moves what they hold back to the grant's vault (money kept by budgets below closed earlier included) unless keep_funds. Idempotent: closing a closed budget changes nothing and says already_closed.",
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
    revokes: true,
    inputSchema: object({ vault_id: UUID, keep_funds: { type: "boolean" } }, ["vault_id"]),
    outputSchema: object(
      {
        vault_id: UUID,
        parent_vault_id: UUID,
        status: { type: "string", enum: ["closed"] },
        swept_cents: AMOUNT,
        currency: { type: "string" },
        transfer_id: { type: ["string", "null"], format: "uuid" },
        revoked_grants: { type: "integer", minimum: 0 },
        already_closed: { type: "boolean" },
        closed_at: UTC_DATE_TIME,
      },
      ["vault_id", "parent_vault_id", "status", "swept_cents", "currency", "transfer_id", "revoked_grants", "already_closed", "closed_at"],
    ),
    async call(args, ctx) {
      const res = await ctx.clients.budgets.closeBudget(
        { accessToken: ctx.accessToken, vaultId: args.vault_id, keepFunds: args.keep_funds === true },
        ctx.call,
      );
      return {
        vault_id: res.vaultId,
        parent_vault_id: res.parentVaultId,
        status: "closed",
        swept_cents: Number(res.sweptCents),
        currency: res.currency,
        transfer_id: res.transferId || null,
        revoked_grants: res.revokedGrants,
        already_closed: res.alreadyClosed,
        closed_at: iso(res.closedAt),
      };
    },
  }),
  defineTool({
    name: "agent.budget.sweep",
    category: "treasury",
    scope: "agent:budget:create",
    auth: "bearer",
    title: "Sweep Closed Agent Budget",
    description:
      "Moves what a budget closed with keep_funds still holds, and what the budgets closed with it hold, back to the grant's vault (the budget's parent). Only a closed budget made under the grant's vault. Idempotent: when nothing is left it moves nothing and says nothing_to_sweep.",
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object({ vault_id: UUID }, ["vault_id"]),
    outputSchema: object(
      {
        vault_id: UUID,
        parent_vault_id: UUID,
        swept_cents: AMOUNT,
        currency: { type: "string" },
        transfer_id: { type: ["string", "null"], format: "uuid" },
        nothing_to_sweep: { type: "boolean" },
      },
      ["vault_id", "parent_vault_id", "swept_cents", "currency", "transfer_id", "nothing_to_sweep"],
    ),
    async call(args, ctx) {
      const res = await ctx.clients.budgets.sweepBudget({ accessToken: ctx.accessToken, vaultId: args.vault_id }, ctx.call);
      return {
        vault_id: res.vaultId,
        parent_vault_id: res.parentVaultId,
        swept_cents: Number(res.sweptCents),
        currency: res.currency,
        transfer_id: res.transferId || null,
        nothing_to_sweep: res.nothingToSweep,
      };
    },
  }),
];
