import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { COMMANDS, GLOBAL_OPTIONS, findCommand, type CommandSpec, type SubcommandSpec } from "./commands/registry.js";
import { commandHelp, fullName, overview, subcommandHelp, suggest } from "./commands/help.js";
import { FailingAnswer, UsageError, type CommandContext } from "./commands/types.js";
import { lostSecretsLine, outputFormat, print, watchOutput } from "./output.js";

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

/** Set once a command that changes something has done so: an output then lost is not a change undone. */
let commandRan = false;

async function run(argv: string[]): Promise<number> {
  const [first, ...rest] = argv;
  if (first === "--version" || first === "-v" || first === "version") {
    // Plain even when piped, as scripts expect of --version; --json asks for the JSON shape.
    if (rest.length > 1 || (rest.length === 1 && rest[0] !== "--json")) {
      process.stderr.write(`vaultgate: ${first} takes no arguments but --json\nsee 'vaultgate --help'\n`);
      return 2;
    }
    process.stdout.write(rest.length === 1 ? `${JSON.stringify({ version: version() })}\n` : `${version()}\n`);
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
    const config = (await import("./command-config.js")).loadSettings(process.env, cmd.name === "serve");
    if (cmd.name === "serve") return await (await import("./serve-command.js")).runServe(config, parsed.options);
    if (cmd.name === "migrate") {
      const applied = await (await import("./serve-command.js")).runMigrate(config);
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
    commandRan = !sub.readOnly;
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
