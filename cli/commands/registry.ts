/**
 * Every command the CLI knows: its words, options, help text and the module that runs it.
 * This file imports nothing at load time, so `vaultgate --help` and `--version` never load
 * the database, the gateways or the RPC stack; a command's module is imported when it runs.
 */
import { PARTNER_COMMAND } from "./partner-spec.js";
import { csv, pagingOptions, STRANDED_PAGE, type CommandSpec, type OptionSpec, type SubcommandSpec } from "./spec.js";

export type { CommandSpec, OptionSpec, ShownOnceSpec, SubcommandSpec } from "./spec.js";

/** Options every command accepts. */
export const GLOBAL_OPTIONS: Record<string, OptionSpec> = {
  help: { type: "boolean", short: "h", description: "show this help" },
  json: { type: "boolean", description: "print JSON (the default when stdout is not a terminal)" },
};

export const COMMANDS: CommandSpec[] = [
  {
    name: "serve",
    summary: "run the service (core and gateways; embedded database unless DATABASE_URL)",
    subcommands: [
      {
        name: "",
        summary: "run the service until SIGINT/SIGTERM",
        noJson: "serve prints no answer to format: its log is JSON lines already (LOG_LEVEL sets how much), so --json does not apply",
        options: { role: { type: "string", value: "all|core|gateway", description: "which part to run (default all)" } },
        examples: [
          "vaultgate serve",
          "DATABASE_URL=postgres://... vaultgate serve --role core",
          "CORE_URL=https://core.internal:8081 vaultgate serve --role gateway",
        ],
      },
    ],
  },
  {
    name: "migrate",
    summary: "apply database migrations (serve also does this on start)",
    subcommands: [
      { name: "", summary: "apply pending migrations and print their names", examples: ["vaultgate migrate", "DATABASE_URL=postgres://... vaultgate migrate"] },
    ],
  },
  PARTNER_COMMAND,
  {
    name: "user",
    summary: "create, find and shape users",
    load: async () => (await import("./user.js")).userCommand,
    subcommands: [
      {
        name: "create",
        summary: "create a user and its root vault (an existing e-mail returns its ids)",
        admin: true,
        options: { email: { type: "string", value: "EMAIL", required: true, description: "the user's e-mail" } },
        examples: ["vaultgate user create --email ada@example.com"],
      },
      {
        name: "list",
        summary: "list users with their root vaults, oldest first",
        readOnly: true,
        admin: true,
        options: pagingOptions("users"),
        examples: ["vaultgate user list", "vaultgate user list --limit 10 --cursor <next_cursor>"],
      },
      {
        name: "get",
        summary: "show one user by e-mail (also one stored before the current address rule)",
        readOnly: true,
        admin: true,
        options: { email: { type: "string", value: "EMAIL", required: true, description: "the user's e-mail (any case)" } },
        examples: ["vaultgate user get --email ada@example.com"],
      },
      {
        name: "set-kyc",
        summary: "record a verification outcome (emits kyc.status_changed)",
        admin: true,
        args: ["USER_ID"],
        options: {
          status: { type: "string", value: "STATUS", required: true, description: "not_started|pending|approved|rejected" },
          provider: { type: "string", value: "P", description: "verification provider name" },
        },
        examples: ["vaultgate user set-kyc 6f1c... --status approved --provider sandbox"],
      },
      {
        name: "set-status",
        summary: "activate or deactivate a user; deactivating ends their web sessions and unused codes",
        admin: true,
        args: ["USER_ID", "active|inactive"],
        examples: ["vaultgate user set-status 6f1c... inactive"],
      },
      {
        name: "set-email",
        summary: "change a user's e-mail; codes sent to the old one stop working and their web sessions end",
        admin: true,
        args: ["USER_ID"],
        options: { email: { type: "string", value: "EMAIL", required: true, description: "the new e-mail (no other user may have it, in any case)" } },
        examples: ["vaultgate user get --email old.address@example.com", "vaultgate user set-email 6f1c... --email ada@example.com"],
      },
      {
        name: "add-wallet",
        summary: "add a public wallet address",
        admin: true,
        args: ["USER_ID"],
        options: {
          chain: { type: "string", value: "CHAIN", required: true, description: "one of the supported chains, e.g. sol, eth" },
          address: { type: "string", value: "ADDR", required: true, description: "the public address" },
        },
        examples: ["vaultgate user add-wallet 6f1c... --chain sol --address 9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin"],
      },
      {
        name: "provision-us-account",
        summary: "provision USD receiving details (idempotent)",
        admin: true,
        args: ["USER_ID"],
        examples: ["vaultgate user provision-us-account 6f1c..."],
      },
    ],
  },
  {
    name: "consent",
    summary: "grant or revoke a user's consent for a partner",
    load: async () => (await import("./consent.js")).consentCommand,
    subcommands: ["grant", "revoke"].map((name) => ({
      name,
      summary: name === "grant" ? "add consent scopes (default: every consent scope)" : "remove consent scopes (default: all of them)",
      admin: true,
      options: {
        partner: { type: "string", value: "CLIENT_ID", required: true, description: "the partner's client_id" },
        user: { type: "string", value: "USER_ID", required: true, description: "the user" },
        scopes: { type: "string", value: "a,b", description: csv("consent scopes") },
      },
      examples: [`vaultgate consent ${name} --partner gpc_acme_1a2b3c4d --user 6f1c... --scopes kyc:read,wallet:read`],
    })) as SubcommandSpec[],
  },
  {
    name: "ledger",
    summary: "record users' transfers; prove the books",
    load: async () => (await import("./ledger.js")).ledgerCommand,
    subcommands: [
      {
        name: "record",
        summary: "record a credit or debit (settled and failed ones emit events)",
        admin: true,
        args: ["USER_ID"],
        options: {
          direction: { type: "string", value: "credit|debit", required: true, description: "direction" },
          "amount-cents": { type: "string", value: "N", required: true, description: "amount in cents" },
          currency: { type: "string", value: "CUR", description: "currency (default USD)" },
          status: { type: "string", value: "S", description: "pending|settled|failed (default settled)" },
        },
        examples: ["vaultgate ledger record 6f1c... --direction credit --amount-cents 2500"],
      },
      {
        name: "verify",
        summary: "prove every ledger transaction balances and every balance equals its postings (exit 1 naming the first discrepancy)",
        readOnly: true,
        admin: true,
        options: {
          chains: {
            type: "boolean",
            description: "also compare each evm hot wallet's USDC transfers and balance with the books (exit 1 naming every difference)",
          },
          "from-block": {
            type: "string",
            value: "N|CHAIN=N,...",
            description: "with --chains: read from this block for this run instead of CHAIN_<NAME>_START_BLOCK (every chain, or the ones named)",
          },
        },
        examples: ["vaultgate ledger verify", "vaultgate ledger verify --chains", "vaultgate ledger verify --chains --from-block base=21000000"],
        notes: [
          "findings lists the first 100 closed budgets' vaults still holding money; with more_findings,",
          "'vaultgate ledger stranded --cursor <more_findings_cursor>' lists the rest.",
        ],
      },
      {
        name: "stranded",
        summary: "list closed budgets' vaults still holding money, oldest close first, a page at a time",
        readOnly: true,
        admin: true,
        options: pagingOptions("vaults", STRANDED_PAGE),
        examples: ["vaultgate ledger stranded", "vaultgate ledger stranded --cursor <next_cursor>", "vaultgate ledger stranded --all"],
      },
    ],
  },
  {
    name: "wallet",
    summary: "the hot wallets chains settle from (address to fund, USDC balance)",
    load: async () => (await import("./wallet.js")).walletCommand,
    subcommands: [
      {
        name: "address",
        summary: "print a chain's hot wallet address (its key is the one serve makes in DATA_DIR; never made here)",
        readOnly: true,
        options: { chain: { type: "string", value: "C", required: true, description: "eth, base, arb, op or polygon" } },
        examples: ["vaultgate wallet address --chain base"],
      },
      {
        name: "balance",
        summary: "print a chain's hot wallet USDC balance, read from its node",
        readOnly: true,
        options: { chain: { type: "string", value: "C", required: true, description: "a chain on the evm rail" } },
        examples: ["vaultgate wallet balance --chain base"],
      },
    ],
  },
  {
    name: "dev",
    summary: "development helpers",
    load: async () => (await import("./dev.js")).devCommand,
    subcommands: [
      {
        name: "chain",
        summary: "run a local EVM node with USDC deployed and the eth and base hot wallets funded; print the settings",
        noJson: "dev chain prints KEY=value lines, not JSON (--format env prints only those)",
        options: {
          port: { type: "string", value: "P", description: "the node's port (default 8545)" },
          format: { type: "string", value: "text|env", description: "env prints only the KEY=value lines" },
        },
        examples: ["vaultgate dev chain", "vaultgate dev chain --port 8546 --format env > chain.env"],
      },
      {
        name: "outbox",
        summary: "show the e-mails the embedded default delivered (one-time codes)",
        readOnly: true,
        admin: true,
        options: { email: { type: "string", value: "EMAIL", description: "only this recipient" } },
        examples: ["vaultgate dev outbox --email ada@example.com"],
      },
    ],
  },
  {
    name: "keys",
    summary: "rotate and retire token signing keys",
    load: async () => (await import("./keys.js")).keysCommand,
    subcommands: [
      { name: "rotate", summary: "make a new current signing key; the previous one stays published", admin: true, examples: ["vaultgate keys rotate"] },
      {
        name: "retire",
        summary: "withdraw a signing key at once (never the current one)",
        admin: true,
        args: ["KID"],
        examples: ["vaultgate keys retire 2025-01-01-ab12"],
      },
    ],
  },
  {
    name: "treasury",
    summary: "bind, fund and switch a partner's treasury",
    load: async () => (await import("./treasury.js")).treasuryCommand,
    subcommands: [
      {
        name: "bind",
        summary: "bind a treasury to a partner with its caps",
        admin: true,
        options: {
          partner: { type: "string", value: "CLIENT_ID", required: true, description: "the partner's client_id" },
          "payer-entity-id": { type: "string", value: "UUID", required: true, description: "the paying entity" },
          "balance-cents": { type: "string", value: "N", required: true, description: "opening balance in cents" },
          currency: { type: "string", value: "CUR", description: "currency (default USD)" },
          "cap-per-item": { type: "string", value: "N", description: "cap per payment, cents" },
          "cap-per-day": { type: "string", value: "N", description: "cap per day, cents" },
          "cap-lifetime": { type: "string", value: "N", description: "lifetime cap, cents" },
          "step-up-amount": { type: "string", value: "N", description: "an item above this amount is refused (batches have no approval step), cents" },
        },
        examples: ["vaultgate treasury bind --partner gpc_acme_1a2b3c4d --payer-entity-id 0b5e... --balance-cents 100000 --cap-per-day 20000"],
      },
      {
        name: "set-status",
        summary: "switch a treasury's status",
        admin: true,
        args: ["CLIENT_ID", "active|suspended|disabled|mandate_expired"],
        examples: ["vaultgate treasury set-status gpc_acme_1a2b3c4d suspended"],
      },
      {
        name: "fund",
        summary: "add to a treasury's balance",
        admin: true,
        args: ["CLIENT_ID"],
        options: { "amount-cents": { type: "string", value: "N", required: true, description: "amount in cents" } },
        examples: ["vaultgate treasury fund gpc_acme_1a2b3c4d --amount-cents 2500"],
      },
    ],
  },
  {
    name: "grant",
    summary: "issue an agent grant without the browser flow",
    load: async () => (await import("./grant.js")).grantCommand,
    subcommands: [
      {
        name: "issue",
        summary: "issue an agent access and refresh token for a user's vault",
        admin: true,
        shownOnce: ["access_token", "refresh_token"].map((field) => ({ field, replacement: "grant issue issues a new grant" })),
        options: {
          user: { type: "string", value: "USER_ID", required: true, description: "the user" },
          vault: { type: "string", value: "VAULT_ID", required: true, description: "one of the user's vaults" },
          scopes: { type: "string", value: "a,b", required: true, description: "agent scopes, comma-separated" },
          client: { type: "string", value: "CLIENT_ID", description: "the agent's OAuth client" },
          "step-up": { type: "boolean", description: "mark the grant as stepped up" },
        },
        examples: ["vaultgate grant issue --user 6f1c... --vault 91d0... --scopes accounts:read,payments:initiate"],
      },
    ],
  },
  {
    name: "vault",
    summary: "fund vaults",
    load: async () => (await import("./vault.js")).vaultCommand,
    subcommands: [
      {
        name: "fund",
        summary: "add to a vault's balance",
        admin: true,
        args: ["VAULT_ID"],
        options: { "amount-cents": { type: "string", value: "N", required: true, description: "amount in cents" } },
        examples: ["vaultgate vault fund 91d0... --amount-cents 12345"],
      },
    ],
  },
];

export function findCommand(name: string): CommandSpec | undefined {
  return COMMANDS.find((c) => c.name === name);
}
