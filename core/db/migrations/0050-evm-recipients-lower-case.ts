import type { Knex } from "knex";
import { runScript } from "../sql.js";

/** EVM payees are stored in lower case from now on; rows written before are brought in line (same address, one spelling). */
export async function up(knex: Knex): Promise<void> {
  await runScript(knex, `UPDATE settlement_payments SET recipient = lower(recipient) WHERE rail = 'evm' AND recipient <> lower(recipient);`);
}

export async function down(): Promise<void> {
  // The spelling each agent gave is still on its payment; settlement needs only the lower-case one.
}
