import { Decision, PaymentStatus } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { withRequestId } from "../../core-clients.js";
import { AMOUNT, CHAIN, defineTool, KEY, object, UUID, type ArgsOf, type Tool } from "./kit.js";

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

function paymentRequest(args: ArgsOf<typeof PAYMENT_INPUT>) {
  const c = args.counterparty;
  return {
    counterparty: { address: c.address, chain: c.chain, token: c.token },
    amountCents: BigInt(args.amount_cents),
    currency: args.currency,
    idempotencyKey: args.idempotency_key,
  };
}

/** Payments from the grant's vault, made or only evaluated under its policy. */
export const paymentTools: readonly Tool[] = [
  defineTool({
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
      $schema: "https://json-schema.org/draft/2020-12/schema",
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
  }),
];
