import { timestampDate } from "@bufbuild/protobuf/wkt";
import type { StrandedFunds } from "../../gen/vaultgate/budgets/v1/funds_pb.js";
import { STRANDED_PAGE } from "./spec.js";
import type { CommandContext } from "./types.js";
import { choiceOption, currencyOption, FailingAnswer, intOption, pages, requirePositional, UsageError } from "./types.js";

/**
 * vaultgate ledger record USER_ID --direction credit|debit --amount-cents N [--currency USD] [--status settled]
 * vaultgate ledger verify [--chains [--from-block N|CHAIN=N,...]]
 * vaultgate ledger stranded [--limit N] [--cursor C | --all]
 */
export async function ledgerCommand(ctx: CommandContext) {
  if (ctx.positionals[0] === "verify") return verify(ctx);
  if (ctx.positionals[0] === "stranded") return stranded(ctx);
  if (ctx.positionals[0] !== "record")
    throw new UsageError("ledger record USER_ID --direction credit|debit --amount-cents N [--currency USD] [--status settled]");
  // Every argument is checked before core is dialled: a typo is a usage error (exit 2).
  const request = {
    userId: requirePositional(ctx, 1, "USER_ID"),
    direction: choiceOption(ctx, "direction", ["credit", "debit"], ""),
    amountCents: BigInt(intOption(ctx, "amount-cents", true, 1)!),
    currency: currencyOption(ctx),
    status: choiceOption(ctx, "status", ["pending", "settled", "failed"], "settled"),
  };
  const { partnerResources } = (await ctx.admin()).clients;
  const res = await partnerResources.recordLedgerEntry(request);
  const t = res.transfer!;
  return {
    user_id: requirePositional(ctx, 1, "USER_ID"),
    transfer_id: t.transferId,
    direction: t.direction,
    amount_cents: Number(t.amountCents),
    currency: t.currency,
    status: t.status,
    created_at: t.createdAt,
  };
}

/**
 * Proves the books; exits 1 naming the first discrepancy of each failed check. Money a
 * closed budget still holds (closed with keep_funds, not swept since) is listed under
 * `findings`: accounted for, so the books balance and the exit status stays 0.
 */
async function verify(ctx: CommandContext) {
  const withChains = ctx.options.chains === true;
  const fromBlock = fromBlockOption(ctx);
  if (fromBlock && !withChains) throw new UsageError("--from-block goes with --chains");
  const { audit, budgets } = (await ctx.admin()).clients;
  const started = performance.now();
  const [r, stranded, onChain] = await Promise.all([
    audit.verifyLedger({}),
    budgets.listStrandedFunds({}),
    withChains ? audit.verifyChains({ fromBlock: fromBlock ?? {} }) : undefined,
  ]);
  const findings = stranded.vaults.map((v) => ({
    check: "stranded_funds",
    ...strandedFields(v),
    message: `closed budget vault ${v.vaultId} holds ${v.balanceCents} ${v.currency}; sweep it back to vault ${v.parentVaultId}`,
  }));
  const report = {
    ok: r.ok,
    transactions: Number(r.transactions),
    postings: Number(r.postings),
    accounts: Number(r.accounts),
    seconds: Math.round(performance.now() - started) / 1000,
    discrepancies: r.discrepancies.map((d) => ({ check: d.check, message: d.message })),
    findings,
    // The first page only: `ledger stranded --cursor` lists the rest.
    ...(stranded.more ? { more_findings: true, more_findings_cursor: stranded.nextCursor } : {}),
    ...(onChain
      ? {
          chains: onChain.chains.map((c) => ({
            chain: c.chain,
            wallet: c.wallet,
            onchain_balance_units: c.onchainBalanceUnits,
            incoming_units: c.incomingUnits,
            outgoing_units: c.outgoingUnits,
            ledger_outflow_units: c.ledgerOutflowUnits,
            from_block: Number(c.fromBlock),
            opening_balance_units: c.openingBalanceUnits,
            to_block: Number(c.toBlock),
          })),
          chain_differences: onChain.differences.map((d) => ({
            chain: d.chain,
            check: d.check,
            tx_hash: d.txHash || null,
            payment_id: d.paymentId || null,
            chain_units: d.chainUnits,
            books_units: d.booksUnits,
            message: d.message,
          })),
        }
      : {}),
  };
  if (!r.ok) return new FailingAnswer(report, `the ledger does not balance: ${r.discrepancies[0]!.message}`);
  if (onChain && !onChain.ok) {
    return new FailingAnswer(report, `the books do not match the chain:\n${onChain.differences.map((d) => d.message).join("\n")}`);
  }
  return report;
}

/** A page of closed budgets' vaults still holding money, oldest close first, and where the next starts. */
async function stranded(ctx: CommandContext) {
  const { budgets } = (await ctx.admin()).clients;
  const { items, nextCursor } = await pages(
    ctx,
    async (limit, cursor) => {
      const res = await budgets.listStrandedFunds({ limit, cursor });
      return {
        items: res.vaults.map((v) => ({ ...strandedFields(v), closed_at: v.closedAt ? timestampDate(v.closedAt).toISOString() : null })),
        nextCursor: res.nextCursor,
      };
    },
    STRANDED_PAGE,
  );
  return { vaults: items, next_cursor: nextCursor };
}

function strandedFields(v: StrandedFunds) {
  return { vault_id: v.vaultId, parent_vault_id: v.parentVaultId, user_id: v.userId, balance_cents: Number(v.balanceCents), currency: v.currency };
}

/** `--from-block N` (every chain: key "*") or `--from-block base=N,eth=M`. */
function fromBlockOption(ctx: CommandContext): Record<string, bigint> | undefined {
  const raw = ctx.options["from-block"];
  if (raw === undefined) return undefined;
  const bad = () => new UsageError("--from-block must be a block number, or CHAIN=N pairs separated by commas (e.g. base=21000000)");
  if (typeof raw !== "string") throw bad();
  const out: Record<string, bigint> = {};
  for (const part of raw.split(",")) {
    const m = /^(?:([a-z]{1,16})=)?(\d{1,16})$/.exec(part);
    if (!m || Number(m[2]) > Number.MAX_SAFE_INTEGER || Object.hasOwn(out, m[1] ?? "*")) throw bad();
    out[m[1] ?? "*"] = BigInt(m[2]!);
  }
  if (Object.hasOwn(out, "*") && Object.keys(out).length > 1) throw bad();
  return out;
}
