import type { Config } from "../config.js";
import type { AdminConnection } from "../core-client.js";
import { isCurrencyCode } from "../../lib/vocabulary.js";

export interface CommandContext {
  config: Config;
  /** Words after the command name, e.g. ["create"] for `partner create`. */
  positionals: string[];
  options: Record<string, string | boolean | undefined>;
  /** Connects on first use (the RPC stack loads only for commands that call core). */
  admin(): Promise<AdminConnection>;
}

/** A command's answer: printed as JSON (piped, --json) or as aligned text (terminal). */
export type Command = (ctx: CommandContext) => Promise<unknown>;

/**
 * An answer that is printed like any other but fails the command: exit `exitCode`, with
 * `complaint` on stderr (e.g. `ledger verify` finding a discrepancy).
 */
export class FailingAnswer {
  constructor(
    readonly value: unknown,
    readonly complaint: string,
    readonly exitCode = 1,
  ) {}
}

/** Wrong words on the command line: exit 2 with the message and where to read more. */
export class UsageError extends Error {
  override name = "UsageError";
  /** The help to point at (default: the command's own --help). */
  readonly see: string | undefined;
  constructor(message: string, see?: string) {
    super(message);
    this.see = see;
  }
}

export function requireOption(ctx: CommandContext, name: string): string {
  const v = ctx.options[name];
  if (typeof v !== "string" || v === "") throw new UsageError(`--${name} is required`);
  return v;
}

export function requirePositional(ctx: CommandContext, index: number, label: string): string {
  const v = ctx.positionals[index];
  if (!v) throw new UsageError(`${label} is required`);
  return v;
}

/** `--x a,b` as a list; `--x ""` is an empty list; absent is undefined. */
export function listOption(ctx: CommandContext, name: string): string[] | undefined {
  const v = ctx.options[name];
  if (v === undefined) return undefined;
  if (typeof v !== "string") throw new UsageError(`--${name} takes a comma-separated list`);
  return v
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean);
}

/** `--currency`, default USD: an ISO 4217 code in upper case, the one shape core records. */
export function currencyOption(ctx: CommandContext): string {
  const v = ctx.options.currency;
  if (v === undefined) return "USD";
  if (typeof v === "string" && isCurrencyCode(v)) return v;
  const upper = typeof v === "string" ? v.toUpperCase() : "";
  const hint = isCurrencyCode(upper) ? ` (did you mean ${upper}?)` : "";
  throw new UsageError(`--currency must be an ISO 4217 code in upper case, such as USD or EUR${hint}`);
}

/** `--name`, one of `allowed` (or `fallback` when absent). */
export function choiceOption(ctx: CommandContext, name: string, allowed: string[], fallback: string): string {
  const v = ctx.options[name] ?? fallback;
  if (typeof v !== "string" || !allowed.includes(v)) throw new UsageError(`--${name} must be ${allowed.slice(0, -1).join(", ")} or ${allowed.at(-1)}`);
  return v;
}

/** An integer option from `min` to `max` (default 0 to 2^53-1); any other value names the range. */
export function intOption(ctx: CommandContext, name: string, required = true, min = 0, max = Number.MAX_SAFE_INTEGER): number | undefined {
  const v = ctx.options[name];
  if (v === undefined && !required) return undefined;
  const n = typeof v === "string" && /^\d{1,16}$/.test(v) ? Number(v) : Number.NaN;
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`--${name} must be an integer from ${min} to ${max}`);
  return n;
}

/** A list command's page: at most and by default (pagingOptions, pages). */
export const LIST_PAGE = { max: 200, fallback: 50 };

/**
 * `--limit N --cursor C` one page, or `--all` every page; next_cursor is null on the last.
 * `fetch` asks core for one page; `sizes` as the command's pagingOptions.
 */
export async function pages<T>(
  ctx: CommandContext,
  fetch: (limit: number, cursor: string) => Promise<{ items: T[]; nextCursor: string }>,
  sizes = LIST_PAGE,
): Promise<{ items: T[]; nextCursor: string | null }> {
  const limit = intOption(ctx, "limit", false, 1, sizes.max) ?? sizes.fallback;
  let cursor = typeof ctx.options.cursor === "string" ? ctx.options.cursor : "";
  const items: T[] = [];
  do {
    const page = await fetch(limit, cursor);
    items.push(...page.items);
    cursor = page.nextCursor;
  } while (ctx.options.all === true && cursor);
  return { items, nextCursor: cursor || null };
}
