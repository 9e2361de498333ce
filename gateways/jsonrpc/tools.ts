import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { agentTokenJson } from "../shared/token-response.js";
import { BudgetStatus, Decision, PaymentStatus } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { withRequestId, type CoreClients } from "../core-clients.js";
import { parseDateTime } from "./date-time.js";

export type Category = "read" | "write" | "treasury";

export interface ToolContext {
  clients: CoreClients;
  requestId: string;
  /** The client address TRUST_PROXY decided, vouched for to core where a call checks a client secret. */
  clientAddress: string;
  /** The bearer as presented ("" for tools with auth "none"); core verifies it. */
  accessToken: string;
}

type Json = Record<string, unknown>;

export interface Tool {
  name: string;
  category: Category;
  /** The scope core requires (informational in tools/list; core enforces it). */
  scope: string | null;
  /** "bearer": the grant token; "none": the tool authenticates with its own params. */
  auth: "bearer" | "none";
  title: string;
  description: string;
  annotations: { readOnlyHint: boolean; destructiveHint: boolean; idempotentHint: boolean; openWorldHint: boolean };
  requiresHumanApproval: boolean;
  inputSchema: Json;
  outputSchema: Json;
  call(args: Json, ctx: ToolContext): Promise<Json>;
  /**
   * For a client that can show URL elicitations (MCP 2025-11-25): the browser step a
   * result is waiting for, answered as -32042 instead of the result. Undefined: none.
   */
  urlElicitation?(result: Json): UrlElicitation | undefined;
}

/** One entry of a -32042 error's `data.elicitations`. */
export interface UrlElicitation {
  mode: "url";
  elicitationId: string;
  url: string;
  message: string;
}

const DIALECT = "https://json-schema.org/draft/2020-12/schema";
const AMOUNT = { type: "integer", minimum: 0, maximum: 9007199254740991 };
const UUID = { type: "string", format: "uuid" };
const DATE_TIME = { type: "string", format: "date-time" };
/** A time we answer with: always UTC, written with Z (toISOString). */
const UTC_DATE_TIME = { type: "string", format: "date-time", pattern: "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,9})?Z$" };
const CHAIN = { type: "string", enum: ["eth", "base", "arb", "op", "polygon", "sol"] };
const KEY = { type: "string", minLength: 8, maxLength: 128 };

function object(properties: Json, required: string[]): Json {
  return { $schema: DIALECT, type: "object", properties, required, additionalProperties: false };
}

const TOKEN_RESPONSE = object(
  {
    access_token: { type: "string" },
    token_type: { type: "string", const: "Bearer" },
    expires_in: { type: "integer" },
    refresh_token: { type: "string" },
    scope: { type: "string" },
    jti: { type: "string" },
  },
  ["access_token", "token_type", "expires_in", "refresh_token", "scope", "jti"],
);


const PAYMENT_INPUT = object(
  {
    counterparty: {
      type: "object",
      properties: { address: { type: "string", minLength: 1, maxLength: 256 }, chain: CHAIN, token: { type: "string", minLength: 1, maxLength: 64 } },
      required: ["address", "chain", "token"],
      additionalProperties: false,
    },
    amount_cents: { ...AMOUNT, minimum: 1 },
    currency: { type: "string", pattern: "^[A-Z]{3}$" },
    idempotency_key: KEY,
  },
  ["counterparty", "amount_cents", "currency", "idempotency_key"],
);

function paymentRequest(args: Json) {
  const c = args.counterparty as { address: string; chain: string; token: string };
  return {
    counterparty: { address: c.address, chain: c.chain, token: c.token },
    amountCents: BigInt(args.amount_cents as number),
    currency: args.currency as string,
    idempotencyKey: args.idempotency_key as string,
  };
}

const opt = (v: unknown) => (typeof v === "number" ? BigInt(v) : undefined);
const iso = (t: Parameters<typeof timestampDate>[0] | undefined) => (t ? timestampDate(t).toISOString() : "");

/** Every agent tool (spec 4.1, 4.5, 4.10; DESIGN 4.1, 4.4). */
export const TOOLS: readonly Tool[] = [
  {
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
        display_name: { type: "string", minLength: 1, maxLength: 100 },
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
      const end = typeof args.time_window_end === "string" ? parseDateTime(args.time_window_end) : undefined;
      const { budget } = await ctx.clients.budgets.createBudget(
        {
          accessToken: ctx.accessToken,
          purpose: args.purpose as string,
          displayName: args.display_name as string,
          amountCapCentsPerTx: opt(args.amount_cap_cents_per_tx),
          amountCapCentsPerDay: opt(args.amount_cap_cents_per_day),
          amountCapCentsLifetime: opt(args.amount_cap_cents_lifetime),
          stepUpAmountCents: opt(args.step_up_amount_cents),
          chainAllowlist: args.chain_allowlist as string[],
          timeWindowEnd: end ? timestampFromDate(end) : undefined,
          idempotencyKey: args.idempotency_key as string,
        },
        withRequestId(ctx.requestId),
      );
      return {
        agent_principal_id: budget!.agentPrincipalId,
        vault_id: budget!.vaultId,
        policy_version: Number(budget!.policyVersion),
        status: budget!.status === BudgetStatus.ACTIVE ? "active" : "draft",
        created_at: iso(budget!.createdAt),
      };
    },
  },
  {
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
        { accessToken: ctx.accessToken, vaultId: args.vault_id as string, amountCents: BigInt(args.amount_cents as number), idempotencyKey: args.idempotency_key as string },
        withRequestId(ctx.requestId),
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
  },
  {
    name: "agent.budget.revoke",
    category: "treasury",
    scope: "agent:budget:create",
    auth: "bearer",
    title: "Close Agent Budget",
    description:
      "Closes one of the budgets created under the grant's vault, and every budget its agent made in turn: revokes every grant on their vaults, declines their payments still waiting for approval, freezes their policies so nothing more is paid, and moves what they hold back to the grant's vault unless keep_funds. Idempotent: closing a closed budget changes nothing and says already_closed.",
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
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
        { accessToken: ctx.accessToken, vaultId: args.vault_id as string, keepFunds: args.keep_funds === true },
        withRequestId(ctx.requestId),
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
  },
  {
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
      const res = await ctx.clients.budgets.sweepBudget({ accessToken: ctx.accessToken, vaultId: args.vault_id as string }, withRequestId(ctx.requestId));
      return {
        vault_id: res.vaultId,
        parent_vault_id: res.parentVaultId,
        swept_cents: Number(res.sweptCents),
        currency: res.currency,
        transfer_id: res.transferId || null,
        nothing_to_sweep: res.nothingToSweep,
      };
    },
  },
  {
    name: "payments.initiate",
    category: "write",
    scope: "payments:initiate",
    auth: "bearer",
    title: "Initiate Payment",
    description: "Pays a counterparty from the grant's vault under its policy; over the step-up amount the payment waits for the owner's approval.",
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: true },
    requiresHumanApproval: false,
    inputSchema: PAYMENT_INPUT,
    outputSchema: {
      $schema: DIALECT,
      type: "object",
      oneOf: [
        object({ kind: { const: "accepted" }, payment_id: UUID, status: { type: "string", enum: ["completed"] } }, ["kind", "payment_id", "status"]),
        object({ kind: { const: "pending_step_up" }, payment_id: UUID, step_up_url: { type: "string", format: "uri" } }, ["kind", "payment_id", "step_up_url"]),
      ].map(({ $schema: _, ...s }) => s),
    },
    async call(args, ctx) {
      const { payment } = await ctx.clients.budgets.initiatePayment({ accessToken: ctx.accessToken, payment: paymentRequest(args) }, withRequestId(ctx.requestId));
      if (payment!.status === PaymentStatus.COMPLETED) return { kind: "accepted", payment_id: payment!.paymentId, status: "completed" };
      return { kind: "pending_step_up", payment_id: payment!.paymentId, step_up_url: payment!.stepUpUrl };
    },
    // The payment id names the elicitation: every retry before approval asks for the same one.
    urlElicitation(result) {
      if (result.kind !== "pending_step_up") return undefined;
      return {
        mode: "url",
        elicitationId: result.payment_id as string,
        url: result.step_up_url as string,
        message: "This payment is over the budget's step-up amount: the account owner must approve it in their browser (sign in, confirm, approve). Then repeat the same call with the same idempotency_key.",
      };
    },
  },
  {
    name: "payments.simulate",
    category: "write",
    scope: "payments:simulate",
    auth: "bearer",
    title: "Simulate Payment",
    description:
      "Evaluates a payment like payments.initiate without side effects: the outcome, the deciding rule, and every rule the payment would break (each with a stable reason_id and words; never a remaining allowance).",
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: PAYMENT_INPUT,
    outputSchema: object(
      {
        outcome: { type: "string", enum: ["accepted", "pending_step_up", "denied"] },
        rule: {
          type: ["string", "null"],
          enum: ["policy_inactive", "time_window_end", "chain_allowlist", "per_tx_cap", "per_day_cap", "lifetime_cap", "balance", "step_up_amount", null],
        },
        broken_rules: {
          type: "array",
          items: {
            type: "object",
            properties: {
              reason_id: { type: "string", enum: ["policy_inactive", "time_window_end", "chain_allowlist", "per_tx_cap", "per_day_cap", "lifetime_cap", "balance", "step_up_amount"] },
              message: { type: "string" },
            },
            required: ["reason_id", "message"],
            additionalProperties: false,
          },
        },
      },
      ["outcome", "rule", "broken_rules"],
    ),
    async call(args, ctx) {
      const res = await ctx.clients.budgets.simulatePayment({ accessToken: ctx.accessToken, payment: paymentRequest(args) }, withRequestId(ctx.requestId));
      const outcome = res.decision === Decision.ACCEPT ? "accepted" : res.decision === Decision.STEP_UP ? "pending_step_up" : "denied";
      return { outcome, rule: res.rule || null, broken_rules: res.brokenRules.map((b) => ({ reason_id: b.reasonId, message: b.message })) };
    },
  },
  {
    name: "accounts.balance",
    category: "read",
    scope: "accounts:read",
    auth: "bearer",
    title: "Vault Balance",
    description: "The balance of the grant's vault.",
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object({}, []),
    outputSchema: object({ vault_id: UUID, balance_cents: AMOUNT, currency: { type: "string" } }, ["vault_id", "balance_cents", "currency"]),
    async call(_args, ctx) {
      const res = await ctx.clients.budgets.getBalance({ accessToken: ctx.accessToken }, withRequestId(ctx.requestId));
      return { vault_id: res.vaultId, balance_cents: Number(res.balanceCents), currency: res.currency };
    },
  },
  {
    name: "audit.list",
    category: "read",
    scope: "audit:stream",
    auth: "bearer",
    title: "List Audit Records",
    description: "Pages through the audit records of the grant's agent, oldest transaction first; save `watermark` and resume with `since` to get each record exactly once.",
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object(
      { cursor: { type: "string", maxLength: 1024 }, since: { type: "string", maxLength: 40 }, limit: { type: "integer", minimum: 1, maximum: 500 } },
      [],
    ),
    outputSchema: object(
      {
        records: {
          type: "array",
          items: object(
            {
              record_id: { type: "string" },
              action: { type: "string" },
              outcome: { type: "string", enum: ["success", "failure"] },
              reason: { type: "string" },
              subject: { type: "string" },
              created_at: UTC_DATE_TIME,
            },
            ["record_id", "action", "outcome", "reason", "subject", "created_at"],
          ),
        },
        next_cursor: { type: ["string", "null"] },
        watermark: { type: "string" },
      },
      ["records", "next_cursor", "watermark"],
    ),
    async call(args, ctx) {
      const res = await ctx.clients.budgets.listGrantAudit(
        { accessToken: ctx.accessToken, cursor: (args.cursor as string) ?? "", since: (args.since as string) ?? "", limit: (args.limit as number) ?? 0 },
        withRequestId(ctx.requestId),
      );
      return {
        records: res.records.map((r) => ({
          record_id: r.recordId,
          action: r.action,
          outcome: r.outcome,
          reason: r.reason,
          subject: r.subject,
          created_at: iso(r.createdAt),
        })),
        next_cursor: res.nextCursor || null,
        watermark: res.watermark,
      };
    },
  },
  {
    name: "agent.grant.issue",
    category: "treasury",
    scope: null,
    auth: "bearer",
    title: "Reissue Grant",
    description: "Issues a new grant that supersedes the calling one; scope can only narrow.",
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object({ scope: { type: "string", maxLength: 1024 } }, []),
    outputSchema: TOKEN_RESPONSE,
    async call(args, ctx) {
      const res = await ctx.clients.grants.supersedeGrant({ accessToken: ctx.accessToken, scope: (args.scope as string) ?? "" }, withRequestId(ctx.requestId));
      return agentTokenJson(res.token);
    },
  },
  {
    name: "agent.grant.refresh",
    category: "treasury",
    scope: null,
    auth: "none",
    title: "Refresh Grant",
    description:
      "Exchanges a refresh token (client authenticated) for a new grant; the old jti is superseded. A client whose client_id is the URL of its metadata document is public and sends no client_secret.",
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object(
      { refresh_token: { type: "string", minLength: 1, maxLength: 512 }, client_id: { type: "string", minLength: 1, maxLength: 512 }, client_secret: { type: "string", minLength: 1, maxLength: 512 } },
      ["refresh_token", "client_id"],
    ),
    outputSchema: TOKEN_RESPONSE,
    async call(args, ctx) {
      const res = await ctx.clients.grants.refreshGrant(
        { refreshToken: args.refresh_token as string, clientId: args.client_id as string, clientSecret: (args.client_secret as string | undefined) ?? "" },
        ctx.clients.vouched(ctx.requestId, ctx.clientAddress),
      );
      return agentTokenJson(res.token);
    },
  },
  {
    name: "killSwitch.all",
    category: "treasury",
    scope: null,
    auth: "bearer",
    title: "Kill Switch: Revoke All Grants",
    description: "Revokes every grant of the calling grant's user, this one included.",
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object({ reason: { type: "string", maxLength: 500 } }, []),
    outputSchema: object({ revoked: { type: "integer", minimum: 0 } }, ["revoked"]),
    async call(args, ctx) {
      const res = await ctx.clients.grants.revokeAllGrants({ accessToken: ctx.accessToken, reason: (args.reason as string) ?? "" }, withRequestId(ctx.requestId));
      return { revoked: res.revoked };
    },
  },
];
