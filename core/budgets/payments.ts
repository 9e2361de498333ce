import { randomUUID } from "node:crypto";
import type { HandlerContext } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ListPendingApprovalsRequest, ListPendingApprovalsResponseSchema } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import {
  Decision,
  type ApprovePaymentRequest,
  type ApprovePaymentResponseSchema,
  type DeclinePaymentRequest,
  type DeclinePaymentResponseSchema,
  type GetPaymentRequest,
  type GetPaymentResponseSchema,
  type InitiatePaymentRequest,
  type InitiatePaymentResponseSchema,
  type SimulatePaymentRequest,
  type SimulatePaymentResponseSchema,
} from "../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { callFacts } from "../context.js";
import { callerTransaction, leftWhileWaiting } from "../deadlines.js";
import type { CursorCodec } from "../paging.js";
import { sha256Hex } from "../../lib/crypto.js";
import { UUID } from "../../lib/uuid.js";
import { PAYMENT_READ_SCOPES } from "../../lib/vocabulary.js";
import { actorOf, auditOutside, claimsFor, SCOPES, usable, type AuditDeps, type TokenDeps } from "./caller.js";
import { canonicalJson } from "./ids.js";
import {
  AWAITING_LIMIT,
  AWAITING_MESSAGE,
  AWAITING_WORDS,
  brokenRules,
  decide,
  evaluatePayment,
  MAX_AWAITING_OWNER,
  RULE_MESSAGES,
  utcDayStart,
  type Evaluation,
  type Rule,
} from "./policy.js";
import type { PaymentRecord } from "./records.js";
import type { BudgetsRowStore } from "./stores/budgets.js";
import type { PaymentsStore } from "./stores/payments.js";
import type { VaultsStore } from "./stores/vaults.js";
import { declining, ownerDecision, type OwnedRecord, type OwnerDecisionBase } from "./owner-decision.js";
import { checkRailInput, minimumCents, paymentInput, refuseBelowMinimum } from "./validation.js";
import { budgetView, paymentView } from "./views.js";
import { reservePayment } from "../settlement/ledger.js";
import type { SettlementPort } from "../settlement/settlement.js";
import type { BudgetGrantsStore } from "../grants/stores/budget-grants.js";

export interface AgentPaymentDeps extends AuditDeps, TokenDeps {
  payments: PaymentsStore;
  /** Which rail settles each chain, and the settlement rows (core/settlement). */
  settlement: SettlementPort;
  /** `{app_url}`, where owners approve step-ups. */
  appUrl: string;
  /** Test-only seam, the same one the audit store honours. */
  auditFault?: () => Error | undefined;
}

export interface OwnerPaymentDeps extends OwnerDecisionBase {
  payments: PaymentsStore;
  appUrl: string;
}

export interface PendingDeps extends Omit<OwnerPaymentDeps, "audit" | "clock"> {
  budgets: BudgetsRowStore;
  vaults: VaultsStore;
  cursors: CursorCodec;
}

/** The most pending approvals one page lists. */
const MAX_PENDING_PAGE = 100;

/** BudgetsService.InitiatePayment: an agent pays from its grant's vault, as the vault's policy decides. */
export async function initiatePayment(
  deps: AgentPaymentDeps,
  req: InitiatePaymentRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof InitiatePaymentResponseSchema>> {
  const { payments, clock } = deps;
  const claims = await claimsFor(deps, req.accessToken, SCOPES.paymentsInitiate);
  const input = paymentInput(req.payment);
  const rail = deps.settlement.evm(input.chain);
  const hash = sha256Hex(canonicalJson(input));
  // Refused before any lock. Only a retry goes on: a payment made before a rule came (a raised minimum, its chain
  // moved to the evm rail) answers its state; one approved since is still to be made, so the rule refuses it below.
  const refusal = railRefusal(rail, input);
  if (refusal && !madeAs(await payments.findPayment(deps.db, claims.vault_id, input.idempotencyKey), hash)) throw refusal;
  type Settled = Awaited<ReturnType<SettlementPort["store"]["get"]>>;
  type Outcome =
    | { actor: string; payment: PaymentRecord; settled?: Settled; denied?: undefined }
    | { actor: string; vaultId: string; denied: Exclude<Rule, "step_up_amount"> | typeof AWAITING_LIMIT };
  const outcome = await callerTransaction(deps.db, ctx.signal, "before the payment was made", async (trx): Promise<Outcome> => {
    const now = clock();
    // The grant and the vault are locked: a revocation committed
    // first is seen, none commits in between, and every payment of the vault is ordered.
    const context = await payments.lockPaymentContext(trx, claims.jti, utcDayStart(now));
    const g = usable(deps, context?.grant);
    if (!context || context.vault.ownerUserId !== g.userId) fail(Reason.GRANT_REQUIRED, "the grant's vault is not available");
    const actor = actorOf(g);
    const { vault, usage, policy } = context;
    if (input.currency !== vault.currency) fail(Reason.INVALID_REQUEST, `currency must be the vault's currency ${vault.currency}`);
    const prior = await payments.findPayment(trx, vault.id, input.idempotencyKey);
    if (prior && prior.paramsHash !== hash) fail(Reason.IDEMPOTENCY_CONFLICT, "idempotency_key was used with other parameters");
    if (prior?.status === "declined") fail(Reason.ACCESS_DENIED, "the vault owner declined this payment");
    // A retry answers the payment's current state, settlement included.
    if (prior && prior.status !== "approved") return { actor, payment: prior, settled: await deps.settlement.store.get(trx, prior.id) };
    if (refusal) throw refusal;

    const evaluation = evaluatePayment(
      policy,
      { balanceCents: vault.balanceCents, spentTodayCents: usage.today, spentLifetimeCents: usage.lifetime },
      { amountCents: input.amountCents, chain: input.chain },
      now,
      { stepUpApproved: prior?.status === "approved" },
    );
    if (evaluation.decision === "deny") return { actor, vaultId: vault.id, denied: evaluation.rule };
    // A new payment waiting for the owner counts against the vault's bound (the vault row is locked).
    if (evaluation.decision === "step_up" && !prior && (await payments.countAwaitingOwner(trx, vault.id, MAX_AWAITING_OWNER)) >= MAX_AWAITING_OWNER) {
      return { actor, vaultId: vault.id, denied: AWAITING_LIMIT };
    }
    let payment: PaymentRecord;
    if (prior) {
      payment = await payments.setPaymentStatus(trx, prior.id, "completed", now);
    } else {
      payment = {
        id: randomUUID(),
        vaultId: vault.id,
        userId: g.userId,
        agentPrincipalId: g.agentPrincipalId,
        grantId: g.id,
        idempotencyKey: input.idempotencyKey,
        paramsHash: hash,
        address: input.address,
        chain: input.chain,
        token: input.token,
        amountCents: input.amountCents,
        currency: input.currency,
        status: evaluation.decision === "step_up" ? "pending_step_up" : "completed",
        createdAt: now,
      };
      await payments.insertPayment(trx, payment);
    }
    // The balance and the running totals the caps read move together, under the vault lock.
    // On the evm rail the amount waits in the in-flight account until its transfer settles.
    if (payment.status === "completed") {
      if (rail) await reservePayment(trx, { vaultId: vault.id, currency: vault.currency, paymentId: payment.id, amountCents: payment.amountCents, at: now });
      else await payments.recordSpend(trx, vault, payment, now);
      await deps.settlement.store.insert(trx, {
        paymentId: payment.id,
        vaultId: vault.id,
        chain: payment.chain,
        rail: rail ? "evm" : "sandbox",
        wallet: rail ? rail.wallet : "sandbox",
        recipient: payment.address,
        amountCents: payment.amountCents,
        currency: payment.currency,
        at: now,
        expiresAt: new Date(now.getTime() + (rail ? rail.settings.expirySeconds * 1000 : 0)),
        status: rail ? "pending" : "completed",
      });
    }
    await deps.audit.append(trx, {
      ...callFacts(ctx),
      actor,
      action: payment.status === "completed" ? "payments.initiate" : "payments.initiate.pending_step_up",
      outcome: "success",
      subject: payment.id,
      at: now,
    });
    return { actor, payment, settled: payment.status === "completed" ? await deps.settlement.store.get(trx, payment.id) : undefined };
  });
  if (outcome.denied !== undefined) {
    const rule = outcome.denied;
    await auditOutside(
      deps,
      ctx,
      outcome.actor,
      "payments.initiate",
      "failure",
      rule === "balance" ? "insufficient_funds" : `policy_denied:${rule}`,
      outcome.vaultId,
    );
    if (rule === "balance") fail(Reason.INSUFFICIENT_FUNDS, "the vault's available balance is below the amount");
    if (rule === AWAITING_LIMIT) fail(Reason.POLICY_DENIED, AWAITING_MESSAGE, { limitName: rule });
    // The limit is named; no remaining allowance is revealed.
    fail(Reason.POLICY_DENIED, `${rule}: ${RULE_MESSAGES[rule]}`, { limitName: rule });
  }
  return { payment: paymentView(deps.appUrl, outcome.payment, outcome.settled) };
}

/** What the rail refuses in a payment still to be made (its input rules, its minimum); undefined when it takes it. */
function railRefusal(rail: ReturnType<SettlementPort["evm"]>, input: ReturnType<typeof paymentInput>): unknown {
  try {
    checkRailInput(rail, input);
    if (input.amountCents < minimumCents(rail)) refuseBelowMinimum(rail, input);
    return undefined;
  } catch (err) {
    return err;
  }
}

/** True when `p` is this very payment (same key and parameters), made, waiting or declined: a retry answers it. */
const madeAs = (p: PaymentRecord | undefined, hash: string): boolean => p !== undefined && p.paramsHash === hash && p.status !== "approved";

export interface GetPaymentDeps extends AuditDeps, TokenDeps {
  payments: PaymentsStore;
  grants: BudgetGrantsStore;
  settlement: SettlementPort;
  appUrl: string;
}

/** BudgetsService.GetPayment: one payment of the grant's vault, with its settlement state. */
export async function getPayment(
  deps: GetPaymentDeps,
  req: GetPaymentRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof GetPaymentResponseSchema>> {
  const claims = await claimsFor(deps, req.accessToken, PAYMENT_READ_SCOPES);
  const g = usable(deps, await deps.grants.findGrant(deps.db, claims.jti));
  if (!UUID.test(req.paymentId)) fail(Reason.NOT_FOUND, "no such payment");
  const p = await deps.payments.findPaymentById(deps.db, req.paymentId.toLowerCase(), false);
  // Another vault's payment reads exactly like one that does not exist.
  if (!p || p.vaultId !== g.vaultId || p.userId !== g.userId) fail(Reason.NOT_FOUND, "no such payment");
  await auditOutside(deps, ctx, actorOf(g), "payments.get", "success", "", p.id);
  return { payment: paymentView(deps.appUrl, p, await deps.settlement.store.get(deps.db, p.id)) };
}

/** BudgetsService.SimulatePayment: what the policy would decide, with every rule the payment breaks. */
export async function simulatePayment(
  deps: AgentPaymentDeps,
  req: SimulatePaymentRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof SimulatePaymentResponseSchema>> {
  const claims = await claimsFor(deps, req.accessToken, SCOPES.paymentsSimulate);
  const input = paymentInput(req.payment);
  // The same input rules as initiate: a payment simulate accepts is one initiate would take.
  const rail = deps.settlement.evm(input.chain);
  checkRailInput(rail, input);
  if (input.amountCents < minimumCents(rail)) refuseBelowMinimum(rail, input);
  const now = deps.clock();
  // One statement reads the grant afresh with everything the decision needs, and
  // writes the read's audit row when the call will answer (audit before data).
  const auditFault = deps.auditFault?.();
  let context: Awaited<ReturnType<PaymentsStore["currentPaymentContext"]>>;
  try {
    context = await deps.payments.currentPaymentContext(
      claims.jti,
      utcDayStart(now),
      auditFault ? undefined : { ...callFacts(ctx), at: now, currency: input.currency },
      ctx.signal,
    );
  } catch (err) {
    // A caller that left while its read waited for a batch had nothing read or written.
    if (leftWhileWaiting(ctx.signal, err)) throw err;
    // The statement carries the audit INSERT: if it fails, the read is withheld.
    return fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, err);
  }
  const g = usable(deps, context?.grant);
  if (!context || context.vault.ownerUserId !== g.userId) fail(Reason.GRANT_REQUIRED, "the grant's vault is not available");
  const { vault, usage, policy } = context;
  if (input.currency !== vault.currency) fail(Reason.INVALID_REQUEST, `currency must be the vault's currency ${vault.currency}`);
  if (auditFault) fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted", {}, auditFault);
  // Every check above passed, so the statement's guarded INSERT must have run.
  if (!context.audited) fail(Reason.AUDIT_UNAVAILABLE, "audit record could not be persisted");
  // Every rule the payment would break, so an agent learns them all at once.
  const broken = brokenRules(
    policy,
    { balanceCents: vault.balanceCents, spentTodayCents: usage.today, spentLifetimeCents: usage.lifetime },
    { amountCents: input.amountCents, chain: input.chain },
    now,
  );
  const evaluation: Evaluation = decide(broken);
  const reasons = broken.map((r) => ({ reasonId: r as string, message: RULE_MESSAGES[r] }));
  // As initiate decides: a payment that would wait is refused while the vault's owner already has the limit waiting.
  if (evaluation.decision === "step_up" && (await deps.payments.countAwaitingOwner(deps.db, vault.id, MAX_AWAITING_OWNER)) >= MAX_AWAITING_OWNER) {
    reasons.push({ reasonId: AWAITING_LIMIT, message: AWAITING_WORDS });
    return { decision: Decision.DENY, rule: AWAITING_LIMIT, brokenRules: reasons };
  }
  const decision = { accept: Decision.ACCEPT, step_up: Decision.STEP_UP, deny: Decision.DENY }[evaluation.decision];
  const rule: Rule | "" = evaluation.decision === "accept" ? "" : evaluation.rule;
  return { decision, rule, brokenRules: reasons };
}

/** A payment as the owner names it. */
const ownedPayment = (deps: OwnerPaymentDeps, rawId: string): OwnedRecord<PaymentRecord> => ({
  rawId,
  noun: "payment",
  find: (trx, id) => deps.payments.findPaymentById(trx, id, true),
  subject: (p) => p.id,
});

/** BudgetsService.ApprovePayment: the owner, freshly stepped up, lets the agent repeat a payment. */
export async function approvePayment(
  deps: OwnerPaymentDeps,
  req: ApprovePaymentRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof ApprovePaymentResponseSchema>> {
  const payment = await ownerDecision(deps, ctx, req.sessionToken, ownedPayment(deps, req.paymentId), {
    stepUp: "approving a payment needs a fresh step-up",
    state: (p) => {
      if (p.status === "declined") fail(Reason.NOT_FOUND, "the payment was declined");
      return p.status === "pending_step_up" ? "decide" : "done";
    },
    decide: (trx, p, now) => deps.payments.setPaymentStatus(trx, p.id, "approved", now),
    action: "payments.approve",
  });
  return { payment: paymentView(deps.appUrl, payment) };
}

/** BudgetsService.DeclinePayment: the owner refuses a payment waiting for approval. */
export async function declinePayment(
  deps: OwnerPaymentDeps,
  req: DeclinePaymentRequest,
  ctx: HandlerContext,
): Promise<MessageInitShape<typeof DeclinePaymentResponseSchema>> {
  const payment = await ownerDecision(deps, ctx, req.sessionToken, ownedPayment(deps, req.paymentId), {
    state: declining("pending_step_up", "payment"),
    decide: (trx, p, now) => deps.payments.setPaymentStatus(trx, p.id, "declined", now),
    action: "payments.decline",
  });
  return { payment: paymentView(deps.appUrl, payment) };
}

/** BudgetsService.ListPendingApprovals: the owner's draft budgets and payments awaiting step-up, two paged lists. */
export async function listPendingApprovals(
  deps: PendingDeps,
  req: ListPendingApprovalsRequest,
): Promise<MessageInitShape<typeof ListPendingApprovalsResponseSchema>> {
  const { db, cursors } = deps;
  const owner = await deps.sessions.verify(req.sessionToken);
  if (req.limit > MAX_PENDING_PAGE) fail(Reason.INVALID_REQUEST, `limit must be 0 (everything) or 1 to ${MAX_PENDING_PAGE}`);
  if (req.agentPrincipalId && !UUID.test(req.agentPrincipalId)) fail(Reason.INVALID_REQUEST, "agent_principal_id must be a UUID");
  if (req.paymentId && !UUID.test(req.paymentId)) fail(Reason.INVALID_REQUEST, "payment_id must be a UUID");
  if (req.paymentId && (req.budgetsCursor || req.paymentsCursor)) fail(Reason.INVALID_REQUEST, "payment_id names one payment and takes no cursor");
  const agent = req.agentPrincipalId.toLowerCase() || undefined;
  const paymentId = req.paymentId.toLowerCase() || undefined;
  // A cursor is bound to its list and to the user it was issued for (core/paging.ts signs it).
  const position = (cursor: string, list: "b" | "p") => {
    if (!cursor) return undefined;
    if (req.limit === 0) fail(Reason.INVALID_CURSOR, "a cursor needs a limit");
    const c = cursors.decode(cursor);
    if (!c || c.l !== list || c.u !== owner.userId || typeof c.t !== "string" || typeof c.i !== "string" || !UUID.test(c.i))
      fail(Reason.INVALID_CURSOR, "the cursor is not valid");
    return { at: c.t, id: c.i };
  };
  const page = (cursor: string, list: "b" | "p") => (req.limit === 0 ? undefined : { limit: req.limit + 1, after: position(cursor, list) });
  const [allBudgets, allPayments] = await Promise.all([
    paymentId ? [] : deps.budgets.listDraftBudgets(db, owner.userId, page(req.budgetsCursor, "b"), agent),
    deps.payments.listPendingPayments(db, owner.userId, page(req.paymentsCursor, "p"), { agentPrincipalId: agent, paymentId }),
  ]);
  const next = <T extends { key: { at: string; id: string } }>(rows: T[], list: "b" | "p") => {
    if (req.limit === 0 || rows.length <= req.limit) return { rows, cursor: "" };
    const kept = rows.slice(0, req.limit);
    const last = kept.at(-1)!.key;
    return { rows: kept, cursor: cursors.encode({ l: list, u: owner.userId, t: last.at, i: last.id }) };
  };
  const { rows: budgets, cursor: nextBudgetsCursor } = next(allBudgets, "b");
  const { rows: payments, cursor: nextPaymentsCursor } = next(allPayments, "p");
  // Review pages show limits in the vault's currency (a child vault inherits its parent's).
  const currencies = await deps.vaults.currenciesOf(db, [...new Set(budgets.map((b) => b.vaultId))]);
  return {
    draftBudgets: budgets.map((b) => budgetView(b, currencies.get(b.vaultId))),
    pendingPayments: payments.map((p) => paymentView(deps.appUrl, p)),
    nextBudgetsCursor,
    nextPaymentsCursor,
  };
}
