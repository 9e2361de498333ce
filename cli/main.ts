import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { COMMANDS, GLOBAL_OPTIONS, findCommand, type CommandSpec, type SubcommandSpec } from "./commands/registry.js";
import { commandHelp, fullName, overview, subcommandHelp, suggest } from "./commands/help.js";
import { FailingAnswer, UsageError, type CommandContext } from "./commands/types.js";
import type { Config } from "./config.js";
import type { Role } from "./serve.js";
import { lostSecretsLine, outputFormat, print, watchOutput } from "./output.js";
import { databaseAddress } from "./migrate.js";

// Only node built-ins and the command table load up front: each command imports what it
// needs (the RPC stack, the database, the gateways) when it runs, so help and --version
// stay fast.

export async function main(argv: string[]): Promise<number> {
  // serve logs through a stream of its own; every other command's output is checked once written.
  if (argv[0] === "serve") return run(argv);
  const outputFailure = watchOutput();
  const code = await run(argv);
  const err = await outputFailure();
  if (!err) return code;
  // A reader that went away (`| head -1`) has what it wanted, unless it left a shown-once secret (lost to `>&-` too).
  const lost = lostSecretsLine();
  if (err.code === "EPIPE" || (err.code === "EBADF" && lost)) {
    if (!lost) return code;
    process.stderr.write(`vaultgate: ${lost}\n`);
    return code === 0 ? 1 : code;
  }
  const reason = err.code ? `${err.code}: ${err.message.replace(/^\w+: |, write$/g, "")}` : err.message;
  process.stderr.write(`vaultgate: could not write the output to stdout (${reason})${commandRan && code === 0 ? "; the command itself ran" : ""}\n`);
  return code === 0 ? 1 : code;
}

/** Set once a command has done its work: an output then lost is not a change undone. */
let commandRan = false;

async function run(argv: string[]): Promise<number> {
  const [first, ...rest] = argv;
  if (first === "--version" || first === "-v" || first === "version") {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  if (first === undefined) {
    process.stderr.write(`${overview(version())}\n`);
    return 2;
  }
  if (first === "--help" || first === "-h") {
    process.stdout.write(`${overview(version())}\n`);
    return 0;
  }
  if (first === "help") return help(rest);

  let cmd: CommandSpec | undefined;
  let sub: SubcommandSpec | undefined;
  try {
    cmd = findCommand(first);
    if (!cmd) {
      if (first.startsWith("-")) throw new UsageError(`unknown option ${first}; options go after the command`, "vaultgate --help");
      throw new UsageError(
        `unknown command: ${first}${didYouMean(
          first,
          COMMANDS.map((c) => c.name),
        )}`,
        "vaultgate --help",
      );
    }
    let args = rest;
    if (cmd.subcommands[0]!.name === "") {
      sub = cmd.subcommands[0]!;
    } else {
      const word = rest[0];
      if (word === undefined || word === "--help" || word === "-h") {
        // Asked for, help is the answer (stdout); a missing subcommand is a usage error (stderr).
        (word === undefined ? process.stderr : process.stdout).write(`${commandHelp(cmd)}\n`);
        return word === undefined ? 2 : 0;
      }
      sub = cmd.subcommands.find((s) => s.name === word);
      if (!sub) {
        const names = cmd.subcommands.map((s) => s.name);
        throw new UsageError(`unknown subcommand: ${cmd.name} ${word}${didYouMean(word, names)} (one of ${names.join(", ")})`, `vaultgate ${cmd.name} --help`);
      }
      args = rest.slice(1);
    }
    const parsed = parse(sub, args);
    if (parsed === "help") {
      process.stdout.write(`${subcommandHelp(cmd, sub)}\n`);
      return 0;
    }
    const format = outputFormat(parsed.options);
    const config = await loadSettings(cmd.name === "serve");
    if (cmd.name === "serve") return await runServe(config, parsed.options);
    if (cmd.name === "migrate") {
      const applied = await runMigrate(config);
      commandRan = true;
      print(applied, format);
      return 0;
    }
    let admin: Awaited<ReturnType<CommandContext["admin"]>> | undefined;
    const ctx: CommandContext = {
      config,
      positionals: [sub.name, ...parsed.positionals],
      options: parsed.options,
      admin: async () => (admin ??= await (await import("./core-client.js")).connectAdmin(config)),
    };
    const run = await cmd.load!();
    let result: unknown;
    try {
      result = await run(ctx);
    } catch (err) {
      if (admin) throw await (await import("./core-client.js")).describeRpcError(err, admin);
      throw err;
    }
    commandRan = true;
    // Only a secret this run made is shown once; one the operator supplied (partner webhook --secret) is theirs.
    const shownOnce = (sub.shownOnce ?? []).filter((s) => !s.suppliedBy || parsed.options[s.suppliedBy] === undefined);
    if (result instanceof FailingAnswer) {
      print(result.value, format, shownOnce);
      process.stderr.write(`vaultgate: ${result.complaint}\n`);
      return result.exitCode;
    }
    // A command that wrote its own output (dev chain) answers nothing.
    if (result !== undefined) print(result, format, shownOnce);
    return 0;
  } catch (err) {
    if (err instanceof UsageError) {
      const see = err.see ?? (cmd && sub ? `${fullName(cmd, sub)} --help` : "vaultgate --help");
      process.stderr.write(`vaultgate: ${err.message}\nsee '${see}'\n`);
      return 2;
    }
    process.stderr.write(`vaultgate: ${err instanceof Error ? err.message : String(err)}\n`);
    return 1;
  }
}

function help(words: string[]): number {
  const [name, subName] = words;
  if (!name) {
    process.stdout.write(`${overview(version())}\n`);
    return 0;
  }
  const cmd = findCommand(name);
  if (!cmd) {
    process.stderr.write(
      `vaultgate: no help for unknown command ${name}${didYouMean(
        name,
        COMMANDS.map((c) => c.name),
      )}\nsee 'vaultgate --help'\n`,
    );
    return 2;
  }
  // A word past the command (and its subcommand, where it has them) is a typo, not help for something else.
  const extra = words[cmd.subcommands[0]!.name ? 2 : 1];
  if (extra !== undefined) {
    process.stderr.write(`vaultgate: unexpected argument ${JSON.stringify(extra)}\nsee 'vaultgate help ${cmd.name}'\n`);
    return 2;
  }
  if (!subName) {
    process.stdout.write(`${commandHelp(cmd)}\n`);
    return 0;
  }
  const sub = cmd.subcommands.find((s) => s.name === subName);
  if (!sub) {
    process.stderr.write(
      `vaultgate: unknown subcommand: ${cmd.name} ${subName}${didYouMean(
        subName,
        cmd.subcommands.map((s) => s.name),
      )}\nsee 'vaultgate ${cmd.name} --help'\n`,
    );
    return 2;
  }
  process.stdout.write(`${subcommandHelp(cmd, sub)}\n`);
  return 0;
}

function didYouMean(word: string, candidates: string[]): string {
  const s = suggest(word, candidates);
  return s ? `; did you mean ${s}?` : "";
}

/** node:util parseArgs in strict mode, with messages that say what was meant. */
function parse(sub: SubcommandSpec, args: string[]) {
  const specs = { ...(sub.options ?? {}), ...GLOBAL_OPTIONS };
  const options = Object.fromEntries(Object.entries(specs).map(([k, o]) => [k, o.short ? { type: o.type, short: o.short } : { type: o.type }]));
  let parsed: { values: Record<string, string | boolean | undefined>; positionals: string[] };
  try {
    const { values, positionals, tokens } = parseArgs({ args: dashedValuesLast(args, specs), options, strict: true, allowPositionals: true, tokens: true });
    parsed = { values, positionals } as typeof parsed;
    // parseArgs keeps the last of a repeated option; an operator who typed two meant something else.
    const seen = new Set<string>();
    for (const t of tokens) {
      if (t.kind !== "option" || t.name === "help") continue;
      if (seen.has(t.name)) throw new UsageError(`--${t.name} is given more than once`);
      seen.add(t.name);
    }
  } catch (err) {
    if (args.includes("--help") || args.includes("-h")) return "help" as const;
    if (err instanceof UsageError) throw err;
    throw new UsageError(parseError(err, Object.keys(specs), args));
  }
  if (parsed.values.help) return "help" as const;
  if (sub.noJson && parsed.values.json) throw new UsageError(sub.noJson);
  const expected = sub.args ?? [];
  if (parsed.positionals.length > expected.length) throw new UsageError(`unexpected argument ${JSON.stringify(parsed.positionals[expected.length])}`);
  const missing = expected.slice(parsed.positionals.length);
  if (missing.length > 0) throw new UsageError(`${missing.join(" ")} ${missing.length > 1 ? "are" : "is"} required`);
  for (const [name, o] of Object.entries(specs)) {
    const v = parsed.values[name];
    if (o.required && (v === undefined || (v === "" && !o.allowEmpty))) throw new UsageError(`--${name} ${o.value ?? "VALUE"} is required`);
  }
  return { positionals: parsed.positionals, options: parsed.values };
}

/**
 * A key id is base64url and can start with '-' or '--', which parseArgs would read as options. Our only short option is
 * `-h`, and no option is named like a 43-character thumbprint, so such arguments (not an option's value) move after `--`.
 */
function dashedValuesLast(args: string[], specs: Record<string, { type: string }>): string[] {
  const end = args.indexOf("--");
  const head = end < 0 ? args : args.slice(0, end);
  const dashed: string[] = [];
  const rest: string[] = [];
  head.forEach((a, i) => {
    const prev = head[i - 1];
    const takesValue = prev !== undefined && /^--[^=]+$/.test(prev) && specs[prev.slice(2)]?.type === "string";
    const thumbprint = /^--[A-Za-z0-9_-]{41}$/.test(a) && !(a.slice(2) in specs);
    ((/^-[^-]./.test(a) || thumbprint) && !takesValue ? dashed : rest).push(a);
  });
  if (dashed.length === 0) return args;
  return [...rest, "--", ...dashed, ...(end < 0 ? [] : args.slice(end + 1))];
}

function parseError(err: unknown, known: string[], args: string[]): string {
  const code = (err as { code?: string }).code;
  const message = err instanceof Error ? err.message : String(err);
  if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION") {
    const flag = /'([^']+)'/.exec(message)?.[1] ?? "";
    const bare = flag.replace(/^-+/, "").split("=")[0]!;
    const s = suggest(bare, known);
    return `unknown option ${flag.split("=")[0]}${s ? `; did you mean --${s}?` : ""}`;
  }
  if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE") {
    // Node names an option with a short form as '-h, --help': the long form is what was typed.
    const flag = /'(?:-\w, )?(-[^' ]+)/.exec(message)?.[1] ?? "";
    const name = flag.replace(/^-+/, "");
    const spec = GLOBAL_OPTIONS[name];
    if (/does not take an argument/.test(message) || spec?.type === "boolean") return `${flag} takes no value`;
    const i = args.findIndex((a) => a === flag || a.startsWith(`${flag}=`));
    const next = i >= 0 ? args[i + 1] : undefined;
    return next === undefined ? `${flag} needs a value` : `${flag} needs a value (got ${JSON.stringify(next)}; write ${flag}=${next} if that is the value)`;
  }
  return message;
}

/** Settings are read only when a command runs: help works even with a broken environment. */
async function loadSettings(serving: boolean): Promise<Config> {
  const [{ loadConfig }, { loadCommandConfig }, { checkDataDirPath }] = await Promise.all([
    import("./config.js"),
    import("./command-config.js"),
    import("./data-dir.js"),
  ]);
  const config = serving ? loadConfig(process.env) : loadCommandConfig(process.env);
  checkDataDirPath(config.dataDir);
  return config;
}

async function runMigrate(config: Config) {
  try {
    return await (await import("./migrate.js")).runMigrate(config);
  } catch (err) {
    throw (await unreachable(err, config)) ?? loginRefused(err, config);
  }
}

async function runServe(config: Config, options: Record<string, string | boolean | undefined>): Promise<number> {
  const role = (options.role ?? "all") as Role;
  if (!["all", "core", "gateway"].includes(role)) throw new UsageError("--role must be all, core or gateway");
  const [{ createLogger }, { serve }] = await Promise.all([import("./logger.js"), import("./serve.js")]);
  const logger = createLogger(config.logLevel);
  const terminal = Boolean(process.stderr.isTTY);
  // A gateway opens no database: it names the core it dials instead.
  const database =
    role === "gateway"
      ? undefined
      : config.databaseUrl
        ? `PostgreSQL at ${databaseAddress(config.databaseUrl)}`
        : `the embedded database in ${config.dataDir}/pgdata`;
  if (terminal) {
    process.stderr.write(
      database ? `Starting Vaultgate (${role}) on ${database}; migrations run first...\n` : `Starting Vaultgate (gateway) for core at ${config.coreUrl}...\n`,
    );
  }
  let running: Awaited<ReturnType<typeof serve>>;
  try {
    running = await serve(config, role, logger);
  } catch (err) {
    throw (await unreachable(err, config)) ?? loginRefused(err, config);
  }
  if (running.gatewayUrl) {
    const failing = await readinessProblems(running.gatewayUrl);
    const urls = {
      dashboard: `${config.appUrl}/dashboard/agents`,
      mcp: `${config.mcpUrl}/mcp/read, /mcp/write, /mcp/treasury`,
      partner_api: `${config.baseUrl}/api/partner`,
      openapi: `${config.baseUrl}/api/partner/openapi.json`,
    };
    if (failing.length === 0) {
      logger.info({ gateway: running.gatewayUrl, core: running.coreUrl ?? config.coreUrl, database, urls }, "Vaultgate is ready");
    } else {
      // Up but not ready: say what fails instead of inviting partners to retry blindly.
      logger.warn({ gateway: running.gatewayUrl, failing }, `Vaultgate started but is not ready: ${failing.join(", ")} failing (GET /readyz)`);
    }
    if (terminal) {
      const lines = [
        failing.length === 0
          ? "Vaultgate is ready."
          : `Vaultgate started, but is NOT ready: ${failing.join(", ")} failing (see GET ${running.gatewayUrl}/readyz and the log).`,
        `  Dashboard      ${urls.dashboard}`,
        `  MCP endpoints  ${config.mcpUrl}/mcp/read  /mcp/write  /mcp/treasury`,
        `  Partner API    ${urls.partner_api}`,
        `  OpenAPI        ${urls.openapi}`,
        running.coreUrl
          ? `  Core (gRPC)    ${running.coreUrl}  (for internal callers; not a web page)`
          : `  Core (gRPC)    ${config.coreUrl}  (dialled by this gateway)`,
        database ? `  Database       ${database}` : "",
        "",
        'Next, in another terminal:  npx vaultgate partner create --name "Acme"    (see the README quick start)',
      ];
      process.stderr.write(`${lines.filter((l, i) => l !== "" || i === lines.length - 2).join("\n")}\n`);
    }
  } else if (running.coreUrl) {
    logger.info({ core: running.coreUrl, database }, "Vaultgate core is up");
    if (terminal) process.stderr.write(`Vaultgate core is listening at ${running.coreUrl} (gRPC, gRPC-Web, Connect) on ${database}.\n`);
  }
  // The lines saying where the service listens go out now, not with the next batch.
  logger.flush();
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  logger.info("shutting down");
  // In-flight work gets the grace period; a second signal or the end of it exits at once.
  const cut = new Promise<"cut">((resolve) => {
    setTimeout(() => resolve("cut"), config.shutdownGraceSeconds * 1000).unref();
    process.once("SIGINT", () => resolve("cut"));
    process.once("SIGTERM", () => resolve("cut"));
  });
  if ((await Promise.race([running.close(), cut])) === "cut") {
    logger.warn({ graceSeconds: config.shutdownGraceSeconds }, "stopped before in-flight work finished (grace period over or a second signal)");
    process.exit(1);
  }
  // Written with the rest of the buffered lines as the process exits (cli/logger.ts).
  logger.info("stopped");
  // An outbound call still waiting on its own timeout must not keep a stopped process alive.
  setTimeout(() => process.exit(0), 500).unref();
  return 0;
}

/** The checks /readyz names as failing (empty when ready). */
async function readinessProblems(gatewayUrl: string): Promise<string[]> {
  try {
    const res = await fetch(`${gatewayUrl}/readyz`);
    if (res.ok) return [];
    const body = (await res.json()) as { failing?: string[] };
    return body.failing?.length ? body.failing : ["readiness"];
  } catch {
    return ["readiness"];
  }
}

/** A database that cannot be reached is a setting to fix, not a crash to read: name the setting. */
async function unreachable(err: unknown, config: Config): Promise<Error | undefined> {
  const { databaseOutage } = await import("../core/interceptors.js");
  if (!databaseOutage(err)) return undefined;
  const setting = config.databaseUrl ? `DATABASE_URL (${databaseAddress(config.databaseUrl)})` : `DATA_DIR (${config.dataDir})`;
  return new Error(`cannot reach the database named by ${setting}: ${(err as Error).message.split("\n")[0]}`);
}

/** A server that refused the user, password or database (SQLSTATE 28xxx, 3D000) names the setting. */
function loginRefused(err: unknown, config: Config): unknown {
  const code = (err as { code?: unknown }).code;
  if (!config.databaseUrl || typeof code !== "string" || !(code.startsWith("28") || code === "3D000")) return err;
  return new Error(`the database server at DATABASE_URL (${databaseAddress(config.databaseUrl)}) refused the login: ${(err as Error).message.split("\n")[0]}`);
}

let cachedVersion: string | undefined;

/** package.json's version: next to cli/ in a checkout, two levels up in the compiled dist/cli/. */
export function version(): string {
  if (cachedVersion) return cachedVersion;
  for (const rel of ["../package.json", "../../package.json"]) {
    try {
      const pkg = JSON.parse(readFileSync(new URL(rel, import.meta.url), "utf8")) as { name?: string; version?: string };
      if (pkg.name === "vaultgate" && pkg.version) return (cachedVersion = pkg.version);
    } catch {
      /* try the next place */
    }
  }
  return "unknown";
}
