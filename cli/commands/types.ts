import type { Config } from "../config.js";
import type { CoreClients } from "../../gateways/core-clients.js";

export interface CommandContext {
  config: Config;
  /** Words after the command name, e.g. ["create"] for `partner create`. */
  positionals: string[];
  options: Record<string, string | boolean | undefined>;
  admin(): Promise<{ clients: CoreClients; coreUrl: string }>;
}

/** A command's answer is printed as JSON on stdout. */
export type Command = (ctx: CommandContext) => Promise<unknown>;

/** Wrong words on the command line: exit 2 with the usage line. */
export class UsageError extends Error {
  override name = "UsageError";
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

/** `--x a,b` as a list; `--x ""` is an empty list; absent is undefined (DESIGN 4.4). */
export function listOption(ctx: CommandContext, name: string): string[] | undefined {
  const v = ctx.options[name];
  if (v === undefined) return undefined;
  if (typeof v !== "string") throw new UsageError(`--${name} takes a comma-separated list`);
  return v.split(",").map((s) => s.trim()).filter(Boolean);
}

/** A non-negative integer option within 2^53-1. */
export function intOption(ctx: CommandContext, name: string, required = true): number | undefined {
  const v = ctx.options[name];
  if (v === undefined && !required) return undefined;
  if (typeof v !== "string" || !/^\d{1,16}$/.test(v) || !Number.isSafeInteger(Number(v))) {
    throw new UsageError(`--${name} must be a non-negative integer`);
  }
  return Number(v);
}
