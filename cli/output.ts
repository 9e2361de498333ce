import { constants, readFileSync, readlinkSync } from "node:fs";
import type { ShownOnceSpec } from "./commands/spec.js";
import { UsageError } from "./commands/types.js";

// How a command's answer is written out: text for people, json for scripts, env for shells.

export type Format = "text" | "json" | "env";

export function outputFormat(options: Record<string, string | boolean | undefined>): Format {
  const f = options.format;
  if (f !== undefined && f !== "text" && f !== "json" && f !== "env") throw new UsageError(`--format must be text, json or env`);
  // Two outputs asked for: refused before anything runs, as a shown-once secret printed in the wrong one is lost.
  if (options.json && f !== undefined && f !== "json") throw new UsageError(`--json and --format ${f} ask for different outputs: give one of them`);
  if (options.json) return "json";
  if (f) return f;
  return process.stdout.isTTY ? "text" : "json";
}

let outputFailure: NodeJS.ErrnoException | undefined;
let watching = false;
/** Shown-once secrets in the output printed since watchOutput: their loss is a failure, even to a closed reader. */
let secretsPrinted: ShownOnceSpec[] = [];
let clientIdPrinted: string | undefined;

/**
 * Records the first error writing stdout (a closed pipe, a full disk) instead of crashing on it;
 * the function returned waits for what is still being written and gives that error, if any.
 */
export function watchOutput(): () => Promise<NodeJS.ErrnoException | undefined> {
  outputFailure = undefined;
  secretsPrinted = [];
  if (!watching) {
    watching = true;
    if (stdoutClosedAtStart()) {
      // What goes to a closed stdout goes nowhere: the first write is the failure (printing nothing lost nothing).
      const write = process.stdout.write;
      process.stdout.write = function (this: NodeJS.WriteStream, ...args: Parameters<typeof write>) {
        outputFailure ??= Object.assign(new Error("stdout is closed"), { code: "EBADF" });
        return write.apply(this, args);
      } as typeof write;
    }
    process.stdout.on("error", (err) => {
      outputFailure ??= err;
    });
    // A closed stderr leaves nowhere to say anything.
    process.stderr.on("error", () => {});
  }
  return async () => {
    const { stdout } = process;
    if (stdout.writableLength > 0 && !stdout.destroyed) await new Promise<void>((resolve) => stdout.write("", () => resolve()));
    // An error is emitted on the next tick, after the write that met it.
    await new Promise((resolve) => setImmediate(resolve));
    return outputFailure;
  };
}

/**
 * Node gives a process started with stdout closed (`>&-`) /dev/null opened read-write in its
 * place, where a shell's `>/dev/null` opens it write-only: only that says the output went nowhere.
 * A daemon's stdio, all three /dev/null read-write, is output discarded on purpose.
 */
function stdoutClosedAtStart(): boolean {
  const nullReadWrite = (fd: number) => {
    try {
      const flags = /^flags:\s*([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, "utf8"))?.[1];
      return flags !== undefined && (Number.parseInt(flags, 8) & 3) === constants.O_RDWR && readlinkSync(`/proc/self/fd/${fd}`) === "/dev/null";
    } catch {
      return false; // no /proc (not Linux): nothing to tell by
    }
  };
  return nullReadWrite(1) && !nullReadWrite(2);
}

/** `shownOnce`: the fields the command declares shown once for this run (never guessed from field names). */
export function print(value: unknown, format: Format, shownOnce: readonly ShownOnceSpec[] = []) {
  secretsPrinted = shownOnceIn(value, shownOnce);
  const clientId = (value as Record<string, unknown> | null)?.client_id;
  clientIdPrinted = typeof clientId === "string" ? clientId : undefined;
  if (format === "json") {
    process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
    return;
  }
  if (format === "env") {
    process.stdout.write(envLines(value as Record<string, unknown>));
    return;
  }
  process.stdout.write(`${renderText(value)}\n`);
  for (const { field, replacement } of secretsPrinted) process.stderr.write(`Store ${field} now: it is not shown again (${replacement}).\n`);
}

/**
 * The one line saying which shown-once secrets in the last output were lost and what replaces them,
 * or undefined when that output carried none.
 */
export function lostSecretsLine(): string | undefined {
  if (secretsPrinted.length === 0) return undefined;
  // The partner's id is no secret and makes the replacing command one to copy.
  const withId = (how: string) => (clientIdPrinted ? `vaultgate ${how}`.replace(/^(vaultgate partner [\w-]+)/, `$1 ${clientIdPrinted}`) : `vaultgate ${how}`);
  const replacements = [...new Set(secretsPrinted.map((s) => withId(s.replacement)))];
  const names = secretsPrinted.map((s) => s.field).join(" and ");
  return `stdout was closed before the output was written: ${names} ${secretsPrinted.length > 1 ? "were" : "was"} not delivered and cannot be shown again; ${replacements.join("; ")}`;
}

function shownOnceIn(value: unknown, shownOnce: readonly ShownOnceSpec[]): ShownOnceSpec[] {
  if (!value || typeof value !== "object") return [];
  const record = value as Record<string, unknown>;
  return shownOnce.filter(({ field }) => typeof record[field] === "string" && record[field] !== "");
}

/** `--format env`: KEY=value lines a shell can eval or a .env file can hold. */
function envLines(value: Record<string, unknown>): string {
  const keys: [string, string][] = [
    ["client_id", "CLIENT_ID"],
    ["client_secret", "CLIENT_SECRET"],
    ["webhook_secret", "WEBHOOK_SECRET"],
  ];
  return keys
    .filter(([k]) => typeof value[k] === "string" && value[k] !== "")
    .map(([k, env]) => `${env}=${shellWord(value[k] as string)}\n`)
    .join("");
}

function shellWord(s: string): string {
  return /^[A-Za-z0-9_.:/+=@-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

const scalar = (v: unknown): string =>
  v === null || v === undefined || v === ""
    ? "-"
    : Array.isArray(v)
      ? v.length
        ? v.map(scalar).join(", ")
        : "-"
      : typeof v === "object"
        ? JSON.stringify(v)
        : String(v);

/** Aligned `key: value` lines; a list of records becomes a small table. */
function renderText(value: unknown): string {
  if (value === null || typeof value !== "object") return scalar(value);
  const entries = Object.entries(value as Record<string, unknown>);
  const tables = entries.filter(([, v]) => Array.isArray(v) && v.length > 0 && v.every((x) => x && typeof x === "object" && !Array.isArray(x)));
  // Beside a table, an empty field (a null next_cursor on the last page) says nothing.
  const plain = entries.filter((e) => !tables.includes(e) && (tables.length === 0 || (e[1] !== null && e[1] !== "")));
  const width = Math.max(0, ...plain.map(([k]) => k.length));
  const out: string[] = [];
  for (const [k, rows] of tables) out.push(`${k}:`, table(rows as Record<string, unknown>[]), "");
  out.push(...plain.map(([k, v]) => `${`${k}:`.padEnd(width + 1)} ${scalar(v)}`));
  return out.join("\n").trimEnd();
}

function table(rows: Record<string, unknown>[]): string {
  const cols = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const cells = rows.map((r) => cols.map((c) => scalar(r[c]).replace(/\s+/g, " ")));
  const widths = cols.map((c, i) => Math.max(c.length, ...cells.map((r) => r[i]!.length)));
  const line = (r: string[]) => `  ${r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join("  ")}`;
  return [line(cols.map((c) => c.toUpperCase())), ...cells.map(line)].join("\n");
}
