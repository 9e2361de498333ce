import { Decision, PaymentStatus } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { CURRENCY_PATTERN, PAYMENT_READ_SCOPES } from "../../../lib/vocabulary.js";
import { AMOUNT, CHAIN, defineTool, KEY, object, UUID, withoutDialect, type ArgsOf, type Tool } from "./kit.js";

const PAYMENT_INPUT = object(
  {
    counterparty: {
      type: "object",
      properties: {
        address: {
          type: "string",
          minLength: 1,
          maxLength: 256,
          description: "On eth, base, arb, op and polygon (any rail): 0x and 40 hex digits; in mixed case it must pass its EIP-55 checksum.",
        },
        chain: CHAIN,
        token: { type: "string", minLength: 1, maxLength: 64 },
      },
      required: ["address", "chain", "token"],
      additionalProperties: false,
    },
    amount_cents: { ...AMOUNT, minimum: 1 },
    currency: { type: "string", pattern: CURRENCY_PATTERN },
    idempotency_key: KEY,
  },
  ["counterparty", "amount_cents", "currency", "idempotency_key"],
);

function paymentRequest(args: ArgsOf<typeof PAYMENT_INPUT>) {
  const c = args.counterparty;
  return {
    counterparty: { address: c.address, chain: c.chain, token: c.token },
    amountCents: BigInt(args.amount_cents),
    currency: args.currency,
    idempotencyKey: args.idempotency_key,
  };
}

/** An accepted payment's settlement status, by the proto's name. */
const SETTLEMENT: Partial<Record<PaymentStatus, "pending" | "submitted" | "completed" | "failed">> = {
  [PaymentStatus.PENDING]: "pending",
  [PaymentStatus.SUBMITTED]: "submitted",
  [PaymentStatus.COMPLETED]: "completed",
  [PaymentStatus.FAILED]: "failed",
};
const SETTLEMENT_STATUS = { type: "string", enum: ["pending", "submitted", "completed", "failed"] } as const;
const TX_HASH = { type: ["string", "null"], pattern: "^0x[0-9a-f]{64}$" } as const;

/** Payments from the grant's vault, made or only evaluated under its policy. */

/** The rules payments.simulate names, in the order it checks them (the last is the vault's room for approvals). */
const SIMULATE_RULES = [
  "policy_inactive",
  "time_window_end",
  "chain_allowlist",
  "per_tx_cap",
  "per_day_cap",
  "lifetime_cap",
  "balance",
  "step_up_amount",
  "pending_approvals",
] as const;
export const paymentTools: readonly Tool[] = [
  defineTool({
    name: "payments.initiate",
    category: "write",
    scope: "payments:initiate",
    auth: "bearer",
    title: "Initiate Payment",
    description:
      "Pays a counterparty from the grant's vault under its policy; over the step-up amount the payment waits for the owner's approval. An accepted payment is reserved at once and settles after: status pending (reserved), submitted (signed, tx_hash known), completed, or failed (refunded). On eth, base, arb, op and polygon the address must be an EVM address (0x and 40 hex digits, EIP-55 checksum when mixed case), and when they settle on chain the token must be USDC and the amount at least the chain's minimum (one dollar unless the operator set another); sol settles on the sandbox rail (completed at once). A retry with the same idempotency_key answers the current state; payments.get reads it later.",
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: true },
    requiresHumanApproval: false,
    inputSchema: PAYMENT_INPUT,
    outputSchema: {
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "object",
      oneOf: [
        object({ kind: { const: "accepted" }, payment_id: UUID, status: SETTLEMENT_STATUS, tx_hash: { type: "string", pattern: "^0x[0-9a-f]{64}$" } }, [
          "kind",
          "payment_id",
          "status",
        ]),
        object({ kind: { const: "pending_step_up" }, payment_id: UUID, step_up_url: { type: "string", format: "uri" } }, ["kind", "payment_id", "step_up_url"]),
      ].map(withoutDialect),
    },
    async call(args, ctx) {
      const { payment } = await ctx.clients.budgets.initiatePayment({ accessToken: ctx.accessToken, payment: paymentRequest(args) }, ctx.call);
      const settled = SETTLEMENT[payment!.status];
      // tx_hash once it is known (never on the sandbox rail).
      if (settled) return { kind: "accepted", payment_id: payment!.paymentId, status: settled, ...(payment!.txHash ? { tx_hash: payment!.txHash } : {}) };
      return { kind: "pending_step_up", payment_id: payment!.paymentId, step_up_url: payment!.stepUpUrl };
    },
    // The payment id names the elicitation: every retry before approval asks for the same one.
    urlElicitation(result) {
      if (result.kind !== "pending_step_up") return undefined;
      return {
        mode: "url",
        elicitationId: result.payment_id as string,
        url: result.step_up_url as string,
        message:
          "This payment is over the budget's step-up amount: the account owner must approve it in their browser (sign in, confirm, approve). Then repeat the same call with the same idempotency_key.",
      };
    },
  }),
  defineTool({
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
          enum: [...SIMULATE_RULES, null],
        },
        broken_rules: {
          type: "array",
          items: {
            type: "object",
            properties: {
              reason_id: {
                type: "string",
                enum: [...SIMULATE_RULES],
              },
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
      const res = await ctx.clients.budgets.simulatePayment({ accessToken: ctx.accessToken, payment: paymentRequest(args) }, ctx.call);
      const outcome = res.decision === Decision.ACCEPT ? "accepted" : res.decision === Decision.STEP_UP ? "pending_step_up" : "denied";
      return { outcome, rule: res.rule || null, broken_rules: res.brokenRules.map((b) => ({ reason_id: b.reasonId, message: b.message })) };
    },
  }),
  defineTool({
    name: "payments.get",
    category: "read",
    scope: PAYMENT_READ_SCOPES[0],
    anyOf: PAYMENT_READ_SCOPES,
    auth: "bearer",
    title: "Get Payment",
    description:
      "One payment of the grant's vault and where its settlement stands: status (pending, submitted, completed, failed; pending_step_up, approved or declined before acceptance), tx_hash once signed, confirmations, failure_reason. Needs accounts:read or payments:initiate.",
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    requiresHumanApproval: false,
    inputSchema: object({ payment_id: UUID }, ["payment_id"]),
    outputSchema: object(
      {
        payment_id: UUID,
        status: { type: "string", enum: ["pending", "submitted", "completed", "failed", "pending_step_up", "approved", "declined"] },
        chain: CHAIN,
        token: { type: "string" },
        amount_cents: AMOUNT,
        currency: { type: "string" },
        counterparty: { type: "string" },
        tx_hash: TX_HASH,
        confirmations: { type: "integer", minimum: 0 },
        failure_reason: { type: ["string", "null"], enum: ["reverted", "dropped", "expired", "cancelled", null] },
        created_at: { type: "string", format: "date-time" },
        updated_at: { type: "string", format: "date-time" },
      },
      [
        "payment_id",
        "status",
        "chain",
        "token",
        "amount_cents",
        "currency",
        "counterparty",
        "tx_hash",
        "confirmations",
        "failure_reason",
        "created_at",
        "updated_at",
      ],
    ),
    async call(args, ctx) {
      const { payment: p } = await ctx.clients.budgets.getPayment({ accessToken: ctx.accessToken, paymentId: args.payment_id }, ctx.call);
      const before = {
        [PaymentStatus.PENDING_STEP_UP]: "pending_step_up",
        [PaymentStatus.APPROVED]: "approved",
        [PaymentStatus.DECLINED]: "declined",
      } as Partial<Record<PaymentStatus, string>>;
      return {
        payment_id: p!.paymentId,
        status: SETTLEMENT[p!.status] ?? before[p!.status] ?? "pending",
        chain: p!.counterparty!.chain,
        token: p!.counterparty!.token,
        amount_cents: Number(p!.amountCents),
        currency: p!.currency,
        counterparty: p!.counterparty!.address,
        tx_hash: p!.txHash || null,
        confirmations: p!.confirmations,
        failure_reason: p!.failureReason || null,
        created_at: timestampDate(p!.createdAt!).toISOString(),
        updated_at: timestampDate(p!.updatedAt ?? p!.createdAt!).toISOString(),
      };
    },
  }),
];
