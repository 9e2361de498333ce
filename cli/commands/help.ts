/** Help text, usage lines and "did you mean" for the commands of registry.ts (no runtime imports). */
import { COMMANDS, GLOBAL_OPTIONS, type CommandSpec, type SubcommandSpec } from "./registry.js";

/** `vaultgate partner create` */
export function fullName(cmd: CommandSpec, sub: SubcommandSpec): string {
  return ["vaultgate", cmd.name, sub.name].filter(Boolean).join(" ");
}

/** One usage line: `vaultgate partner create --name NAME [--slug SLUG] ...` */
function usageLine(cmd: CommandSpec, sub: SubcommandSpec): string {
  const parts = [fullName(cmd, sub), ...(sub.args ?? [])];
  for (const [name, o] of Object.entries(sub.options ?? {})) {
    const flag = o.type === "boolean" ? `--${name}` : `--${name} ${o.value ?? "VALUE"}`;
    parts.push(o.required ? flag : `[${flag}]`);
  }
  return parts.join(" ");
}

export function overview(version: string): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  const lines = [
    `vaultgate ${version}: scoped, revocable grants for agents and partners`,
    "",
    "usage: vaultgate <command> [subcommand] [options]",
    "",
    "commands:",
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}${c.subcommands[0]!.name ? ` (${c.subcommands.map((s) => s.name).join(", ")})` : ""}`),
    "",
    "options: -h, --help  help (also: vaultgate help <command>)   --version   --json  JSON output",
    "",
    "Operator commands talk to the running core (CORE_URL, else http://CORE_HOST:CORE_PORT,",
    "default http://127.0.0.1:8081) with ADMIN_TOKEN, else the token `serve` wrote into",
    "DATA_DIR/admin-token (DATA_DIR defaults to ./.vaultgate). Output is aligned text on a",
    "terminal and JSON when piped or with --json.",
    "",
    "examples:",
    "  vaultgate serve",
    '  vaultgate partner create --name "Acme"',
    "  vaultgate help partner create",
  ];
  return lines.join("\n");
}

export function commandHelp(cmd: CommandSpec): string {
  if (!cmd.subcommands[0]!.name) return subcommandHelp(cmd, cmd.subcommands[0]!);
  const width = Math.max(...cmd.subcommands.map((s) => s.name.length));
  return [
    `vaultgate ${cmd.name}: ${cmd.summary}`,
    "",
    "subcommands:",
    ...cmd.subcommands.map((s) => `  ${s.name.padEnd(width)}  ${s.summary}`),
    "",
    `see 'vaultgate ${cmd.name} <subcommand> --help' for options and examples`,
  ].join("\n");
}

export function subcommandHelp(cmd: CommandSpec, sub: SubcommandSpec): string {
  const options = { ...(sub.options ?? {}), ...GLOBAL_OPTIONS };
  if (sub.noJson) delete options.json;
  const flags = Object.entries(options).map(
    ([name, o]) =>
      [
        `${o.short ? `-${o.short}, ` : ""}--${name}${o.type === "string" ? ` ${o.value ?? "VALUE"}` : ""}`,
        o.description + (o.required ? " (required)" : ""),
      ] as const,
  );
  const width = Math.max(...flags.map(([f]) => f.length));
  return [
    `${fullName(cmd, sub)}: ${sub.summary}`,
    "",
    `usage: ${usageLine(cmd, sub)}`,
    "",
    "options:",
    ...flags.map(([f, d]) => `  ${f.padEnd(width)}  ${d}`),
    ...(sub.notes ? ["", ...sub.notes] : []),
    "",
    "examples:",
    ...sub.examples.map((e) => `  ${e}`),
  ].join("\n");
}

/** The closest candidate to a mistyped word, if one is close enough to be what was meant. */
export function suggest(word: string, candidates: string[]): string | undefined {
  let best: { c: string; d: number } | undefined;
  for (const c of candidates) {
    const d = c.startsWith(word) || word.startsWith(c) ? Math.min(1, Math.abs(c.length - word.length)) : distance(word, c);
    if (!best || d < best.d) best = { c, d };
  }
  return best && best.d <= Math.max(2, Math.floor(word.length / 3)) ? best.c : undefined;
}

function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const cur = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = cur;
    }
  }
  return row[b.length]!;
}
