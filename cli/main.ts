import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, Reason } from "../gen/vaultgate/common/v1/errors_pb.js";
import { createDb } from "../core/db/knex.js";
import { migrateLatest } from "../core/db/migrate.js";
import { ConfigError, loadConfig } from "./config.js";
import { connectAdmin } from "./core-client.js";
import { createLogger } from "./logger.js";
import { serve, type Role } from "./serve.js";
import { partnerCommand } from "./commands/partner.js";
import { keysCommand } from "./commands/keys.js";
import { userCommand } from "./commands/user.js";
import { vaultCommand } from "./commands/vault.js";
import { consentCommand } from "./commands/consent.js";
import { ledgerCommand } from "./commands/ledger.js";
import { treasuryCommand } from "./commands/treasury.js";
import { devCommand, grantCommand } from "./commands/grant.js";
import { UsageError, type Command, type CommandContext } from "./commands/types.js";

const USAGE = `usage: vaultgate <command>
  serve [--role all|core|gateway]     run the service (default: all, embedded database)
  migrate                             apply database migrations
  partner create --name N [--slug S] [--entitlements a,b] [--status active|pending] [--webhook-url U]
  partner rotate-secret CLIENT_ID
  partner suspend|activate CLIENT_ID
  partner entitlements CLIENT_ID --set a,b
  user create --email E
  user set-kyc USER_ID --status S [--provider P]
  user set-status USER_ID active|inactive
  user add-wallet USER_ID --chain C --address A
  user provision-us-account USER_ID
  consent grant|revoke --partner CLIENT_ID --user USER_ID [--scopes a,b]
  ledger record USER_ID --direction credit|debit --amount-cents N [--currency USD] [--status settled]
  partner webhook CLIENT_ID --url U [--secret whsec_...]
  keys rotate
  keys retire KID                     withdraw a signing key at once (never the current one)
  treasury bind --partner CLIENT_ID --payer-entity-id UUID --balance-cents N [--currency USD]
      [--cap-per-item N] [--cap-per-day N] [--cap-lifetime N] [--step-up-amount N]
  treasury set-status CLIENT_ID active|suspended|disabled|mandate_expired
  treasury fund CLIENT_ID --amount-cents N
  grant issue --user USER_ID --vault VAULT_ID --scopes a,b [--client CLIENT_ID] [--step-up]
  dev outbox [--email E]
  vault fund VAULT_ID --amount-cents N
Operator commands talk to the running core (CORE_URL, default http://127.0.0.1:$CORE_PORT)
with ADMIN_TOKEN or the token the service wrote into DATA_DIR.`;

const BOOLEAN_FLAGS = new Set(["step-up", "help"]);

const commands: Record<string, Command> = {
  partner: partnerCommand,
  keys: keysCommand,
  user: userCommand,
  vault: vaultCommand,
  consent: consentCommand,
  ledger: ledgerCommand,
  treasury: treasuryCommand,
  grant: grantCommand,
  dev: devCommand,
};

export async function main(argv: string[]): Promise<number> {
  const { positionals, options } = parseArgv(argv);
  const [name, ...rest] = positionals;
  if (!name || options.help) {
    process.stdout.write(USAGE + "\n");
    return name || options.help ? 0 : 2;
  }
  try {
    const config = loadConfig(process.env);
    if (name === "serve") return await runServe(config, options);
    if (name === "migrate") {
      const db = createDb(config.databaseUrl ? { url: config.databaseUrl } : { dataDir: `${config.dataDir}/pgdata` });
      try {
        const applied = await migrateLatest(db);
        print({ applied });
      } finally {
        await db.destroy();
      }
      return 0;
    }
    const command = commands[name];
    if (!command) throw new UsageError(`unknown command: ${name}`);
    let admin: Awaited<ReturnType<typeof connectAdmin>> | undefined;
    const ctx: CommandContext = { config, positionals: rest, options, admin: async () => (admin ??= await connectAdmin(config)) };
    try {
      print(await command(ctx));
    } catch (err) {
      if (err instanceof ConnectError && admin) throw describeRpcError(err, admin.coreUrl);
      throw err;
    }
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`vaultgate: ${err.message}\n\n${USAGE}\n`);
      return 2;
    }
    const message = err instanceof ConfigError || err instanceof CliError ? err.message : err instanceof Error ? err.message : String(err);
    process.stderr.write(`vaultgate: ${message}\n`);
    return 1;
  }
}

class CliError extends Error {}

function describeRpcError(err: ConnectError, coreUrl: string): CliError {
  const detail = err.findDetails(ErrorDetailSchema)[0];
  if (!detail && (err.code === Code.Unavailable || err.code === Code.Unknown || err.code === Code.Internal) && /ECONNREFUSED|connect/i.test(err.message)) {
    return new CliError(`cannot reach core at ${coreUrl}: is 'vaultgate serve' running?`);
  }
  const reason = detail ? Reason[detail.reason].toLowerCase() : Code[err.code];
  return new CliError(`${err.rawMessage} (${reason})`);
}

async function runServe(config: ReturnType<typeof loadConfig>, options: Record<string, string | boolean | undefined>): Promise<number> {
  const role = (options.role ?? "all") as Role;
  if (!["all", "core", "gateway"].includes(role)) throw new UsageError("--role must be all, core or gateway");
  const logger = createLogger(config.logLevel);
  const running = await serve(config, role, logger);
  if (running.gatewayUrl) {
    logger.info(
      { gateway: running.gatewayUrl, core: running.coreUrl, database: config.databaseUrl ? "postgres" : `embedded (${config.dataDir}/pgdata)` },
      `Vaultgate is up. Partner token endpoint: ${config.baseUrl}/api/partner/oauth/token. ` +
        `Create a first partner in another terminal: npx vaultgate partner create --name "Acme"`,
    );
  }
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  logger.info("shutting down");
  await running.close();
  return 0;
}

function parseArgv(argv: string[]) {
  const positionals: string[] = [];
  const options: Record<string, string | boolean | undefined> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith("--")) {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    if (eq !== -1) {
      options[arg.slice(2, eq)] = arg.slice(eq + 1);
      continue;
    }
    const key = arg.slice(2);
    const next = argv[i + 1];
    if (!BOOLEAN_FLAGS.has(key) && next !== undefined && !next.startsWith("--")) {
      options[key] = next;
      i++;
    } else options[key] = true;
  }
  return { positionals, options };
}

function print(value: unknown) {
  process.stdout.write(JSON.stringify(value, null, 2) + "\n");
}
