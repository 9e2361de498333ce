import { LIST_PAGE, type Command } from "./types.js";

/** The shape of the command table: what help prints and what main parses. */

export interface OptionSpec {
  type: "string" | "boolean";
  short?: string;
  /** Placeholder shown in help, e.g. "N" for `--name N`. */
  value?: string;
  required?: boolean;
  /** A required option that may be "" (an empty list, a cleared URL). */
  allowEmpty?: boolean;
  description: string;
}

export interface SubcommandSpec {
  /** The word after the command ("create"); "" for commands without subcommands. */
  name: string;
  summary: string;
  /** Positional arguments after the subcommand, e.g. ["CLIENT_ID"]. */
  args?: string[];
  options?: Record<string, OptionSpec>;
  examples: string[];
  /** Extra lines for --help. */
  notes?: string[];
  /** Why it prints no JSON: its help then offers no --json, and --json is refused with this. */
  noJson?: string;
  /** Talks to the running core (needs the operator credential). */
  admin?: boolean;
  /** Changes nothing: output lost after it ran is not reported as a change made. */
  readOnly?: boolean;
  /** Output fields holding a secret this run made and shows only once; a lost one is a failure. */
  shownOnce?: ShownOnceSpec[];
}

/** A secret in a command's output that cannot be shown again, and the command that makes another. */
export interface ShownOnceSpec {
  field: string;
  /** e.g. "partner rotate-secret replaces it"; `vaultgate` is put in front. */
  replacement: string;
  /** The option by which the operator supplies the value instead: given, it is theirs and not shown once. */
  suppliedBy?: string;
}

export interface CommandSpec {
  name: string;
  summary: string;
  subcommands: SubcommandSpec[];
  /** Loads the module that runs it (serve and migrate run inside main). */
  load?: () => Promise<Command>;
}

export const csv = (what: string) => `${what}, comma-separated ("" for none)`;

/** The options of a paged list command: the page size, the cursor of the next page, or every page. */
export const pagingOptions = (items: string, sizes = LIST_PAGE): Record<string, OptionSpec> => ({
  limit: { type: "string", value: "N", description: `${items} per page, 1-${sizes.max} (default ${sizes.fallback})` },
  cursor: { type: "string", value: "C", description: "next_cursor of the previous page" },
  all: { type: "boolean", description: "follow every page" },
});

/** `ledger stranded --limit`: what one ListStrandedFunds page holds, at most and by default. */
export const STRANDED_PAGE = { max: 100, fallback: 100 };
