import { readdir } from "node:fs/promises";
import { join, sep } from "node:path";
import { fileURLToPath } from "node:url";

export const root = fileURLToPath(new URL("../..", import.meta.url));

/**
 * The room of core that owns each table: only its files write it, and other rooms read it only where a
 * reason is written below. Others compose the owner's fragments instead (AGENT_GRANT_JOIN, movementCtes).
 */
export const OWNERS: Record<string, string> = {
  agent_payments: "budgets",
  agent_principals: "grants",
  audit_records: "audit",
  authorization_codes: "grants",
  budget_endings: "budgets",
  budgets: "budgets",
  consents: "partners",
  dev_outbox: "identity",
  grants: "grants",
  identity_links: "identity",
  instance_secrets: "db",
  ledger_accounts: "ledger",
  ledger_entries: "ledger",
  ledger_postings: "ledger",
  ledger_transactions: "ledger",
  mail_outbox: "identity",
  oauth_agents: "grants",
  oauth_clients: "grants",
  partner_events: "partners",
  partner_users: "partners",
  partners: "partners",
  passkeys: "identity",
  rate_limit_logs: "rate-limits",
  rate_limit_windows: "rate-limits",
  settlement_nonces: "settlement",
  settlement_payments: "settlement",
  settlement_transactions: "settlement",
  signin_challenges: "identity",
  signin_flows: "identity",
  signing_keys: "keys",
  treasuries: "treasury",
  treasury_batches: "treasury",
  treasury_executions: "treasury",
  us_accounts: "partners",
  user_kyc: "partners",
  user_wallets: "partners",
  users: "identity",
  vault_policies: "budgets",
  vault_provisioning_claims: "budgets",
  vaults: "budgets",
  web_sessions: "identity",
  webhook_lanes: "partners",
};

export async function coreFiles(dir = "core"): Promise<string[]> {
  const entries = await readdir(join(root, dir), { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((e) => {
      const path = join(dir, e.name);
      if (path === join("core", "db", "migrations")) return Promise.resolve([]);
      if (e.isDirectory()) return coreFiles(path);
      return Promise.resolve(e.name.endsWith(".ts") ? [path] : []);
    }),
  );
  return nested.flat();
}

/** The room (folder of core) a file belongs to; core's top-level files are "core". */
export const roomOf = (file: string) => {
  const parts = file.split(sep);
  return parts.length > 2 ? parts[1]! : "core";
};

export const withoutComments = (source: string) => source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");

/** How a file's statements touch a table: written (SQL or knex), read, or not at all. */
export function touches(source: string, table: string): "write" | "read" | undefined {
  const t = table;
  const sqlWrite = new RegExp(`\\b(INSERT INTO|UPDATE|DELETE FROM)\\s+${t}\\b|\\bpruneBatchSql\\(\\s*["'\`]${t}["'\`]`);
  const knexCall = new RegExp(`\\(\\s*["'\`]${t}(\\s+as\\s+\\w+)?["'\`]\\s*\\)([^;]*)`, "g");
  const knexWrite = /\.(insert|update|delete|del)\(/;
  if (sqlWrite.test(source)) return "write";
  let read = false;
  for (const m of source.matchAll(knexCall)) {
    if (knexWrite.test(m[2] ?? "")) return "write";
    read = true;
  }
  const sqlRead = new RegExp(`\\b(FROM|JOIN)\\s+${t}\\b`);
  const knexRead = new RegExp(`\\.(from|join|leftJoin|innerJoin|rightJoin)\\(\\s*["'\`]${t}\\b`);
  return read || sqlRead.test(source) || knexRead.test(source) ? "read" : undefined;
}
