import type { TestStack } from "./stack.js";
import { budgetParams, createOwner, grantFor } from "./budgets.js";

/** What the vault row says against what its completed payments add up to (UTC days). */
export async function totalsAndSums(stack: TestStack, vaultId: string) {
  const { rows } = await stack.core.db.raw(
    `SELECT v.spent_lifetime_cents::int8 AS lifetime, v.spent_day::text AS day, v.spent_day_cents::int8 AS day_cents,
            v.spent_prev_day_cents::int8 AS prev_cents,
            (SELECT coalesce(sum(amount_cents), 0)::int8 FROM agent_payments p WHERE p.vault_id = v.id AND p.status = 'completed') AS sum_lifetime,
            (SELECT coalesce(sum(amount_cents), 0)::int8 FROM agent_payments p WHERE p.vault_id = v.id AND p.status = 'completed'
                AND (p.completed_at AT TIME ZONE 'UTC')::date = v.spent_day) AS sum_day,
            (SELECT coalesce(sum(amount_cents), 0)::int8 FROM agent_payments p WHERE p.vault_id = v.id AND p.status = 'completed'
                AND (p.completed_at AT TIME ZONE 'UTC')::date = v.spent_day - 1) AS sum_prev,
            (SELECT max((completed_at AT TIME ZONE 'UTC')::date)::text FROM agent_payments p WHERE p.vault_id = v.id AND p.status = 'completed') AS last_day
       FROM vaults v WHERE v.id = ?`,
    [vaultId],
  );
  const r = (rows as Record<string, string | null>[])[0]!;
  const n = (k: string) => Number(r[k]);
  return {
    totals: { lifetime: n("lifetime"), day: r.day, dayCents: n("day_cents"), prevCents: n("prev_cents") },
    sums: { lifetime: n("sum_lifetime"), day: r.last_day, dayCents: n("sum_day"), prevCents: n("sum_prev") },
  };
}

export async function fundedChild(stack: TestStack, caps: { perTx?: bigint; perDay?: bigint; lifetime?: bigint }, funds = 100_000_000n) {
  const owner = await createOwner(stack);
  const params = budgetParams({
    amountCapCentsPerTx: caps.perTx ?? 1_000n,
    amountCapCentsPerDay: caps.perDay,
    amountCapCentsLifetime: caps.lifetime,
    stepUpAmountCents: undefined,
  });
  const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner, { stepUp: true }), ...params });
  await stack.admin.budgets.fundVault({ vaultId: budget!.vaultId, amountCents: funds });
  const child = { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId };
  return { child, token: await grantFor(stack, child) };
}
