import type { Db } from "../db/knex.js";
import { createBudgetGrantsStore } from "../grants/stores/budget-grants.js";
import { budgetsStore } from "./stores/budgets.js";
import { createPaymentsStore } from "./stores/payments.js";
import { sagaStore } from "./stores/saga.js";
import { vaultsStore } from "./stores/vaults.js";

/** Every store the budgets service reads and writes through, one per table family. */
export function createBudgetsStore(db: Db) {
  return {
    budgets: budgetsStore,
    saga: sagaStore,
    vaults: vaultsStore,
    payments: createPaymentsStore(db),
    grants: createBudgetGrantsStore(),
  };
}

export type BudgetsStore = ReturnType<typeof createBudgetsStore>;

/** What other rooms get from budgets' tables, through core.ts: the vault reads grants need, a payment's agent. */
export { createGrantVaultsStore } from "./stores/grant-vaults.js";
export { payingAgent } from "./stores/payments.js";
