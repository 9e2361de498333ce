import { timestampDate } from "@bufbuild/protobuf/wkt";
import { type AgentScope, CHAINS, type McpCategory } from "../../../lib/vocabulary.js";
import type { CoreClients, withRequestId } from "../../core-clients.js";
import { DATE_TIME_SHAPE } from "../date-time.js";
import { NAME_FORBIDDEN_CLASS } from "../../../lib/text.js";

/** What every tool definition is built from: the Tool shape, schema atoms, and argument types derived from schemas. */
export type Category = McpCategory;

export interface ToolContext {
  clients: CoreClients;
  /** Call options for every core call of this request: its id and the client address TRUST_PROXY decided. */
  call: ReturnType<typeof withRequestId>;
  /** The bearer as presented ("" for tools with auth "none"); core verifies it. */
  accessToken: string;
}

export type Json = Record<string, unknown>;

export interface Tool {
  name: string;
  category: Category;
  /** The scope core requires (informational in tools/list; core enforces it). */
  scope: AgentScope | null;
  /** Where core accepts any one of several scopes: all of them, `scope` first. */
  anyOf?: readonly AgentScope[];
  /** "bearer": the grant token; "none": the tool authenticates with its own params. */
  auth: "bearer" | "none";
  title: string;
  description: string;
  annotations: { readOnlyHint: boolean; destructiveHint: boolean; idempotentHint: boolean; openWorldHint: boolean };
  requiresHumanApproval: boolean;
  /** A revocation runs even if its client has left before the answer, like the OAuth revoke endpoint. */
  revokes?: true;
  inputSchema: Json;
  outputSchema: Json;
  /** Called only with arguments that passed `inputSchema` (the dispatcher validates first). */
  call(args: Json, ctx: ToolContext): Promise<Json>;
  /**
   * For a client that can show URL elicitations (MCP 2025-11-25): the browser step a
   * result is waiting for, answered as -32042 instead of the result. Undefined: none.
   */
  urlElicitation?(result: Json): UrlElicitation | undefined;
}

/** One entry of a -32042 error's `data.elicitations`. */
export interface UrlElicitation {
  mode: "url";
  elicitationId: string;
  url: string;
  message: string;
}

const DIALECT = "https://json-schema.org/draft/2020-12/schema";
export const AMOUNT = { type: "integer", minimum: 0, maximum: 9007199254740991 } as const;
export const UUID = { type: "string", format: "uuid" } as const;
/** A time we take: the pattern publishes our shape (Z only, seconds optional), which `date-time` alone does not say. */
export const DATE_TIME = { type: "string", format: "date-time", pattern: DATE_TIME_SHAPE.source } as const;
/** A time we answer with: always UTC, written with Z (toISOString). */
export const UTC_DATE_TIME = { type: "string", format: "date-time", pattern: "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,9})?Z$" } as const;
export const CHAIN = { type: "string", enum: CHAINS } as const;
export const KEY = { type: "string", minLength: 8, maxLength: 128 } as const;
/** A name people read (a budget's): 1 to 100 characters, none of lib/text.ts's forbidden ones, not only spaces; core checks the same. */
export const DISPLAY_NAME = { type: "string", minLength: 1, maxLength: 100, pattern: `^(?![\\s\\S]*[${NAME_FORBIDDEN_CLASS}])[\\s\\S]*\\S` } as const;

/** A closed object schema; its literal types are kept so `ArgsOf` can read them. */
export function object<const P extends Record<string, unknown>, const R extends readonly (keyof P & string)[]>(properties: P, required: R) {
  return { $schema: DIALECT, type: "object", properties, required, additionalProperties: false } as const;
}

/** A schema nested in another: the same without `$schema`, which only a root may carry. */
export function withoutDialect<const S extends { $schema: string }>({ $schema: _, ...schema }: S): Omit<S, "$schema"> {
  return schema;
}

/** The TypeScript type of a value valid under schema S (the subset of JSON Schema our tools use). */
export type ArgsOf<S> = S extends { enum: readonly (infer E)[] }
  ? E
  : S extends { const: infer C }
    ? C
    : S extends { type: "string" }
      ? string
      : S extends { type: "integer" | "number" }
        ? number
        : S extends { type: "boolean" }
          ? boolean
          : S extends { type: "array"; items: infer I }
            ? ArgsOf<I>[]
            : S extends { type: "object"; properties: infer P; required: readonly (infer R)[] }
              ? Expand<{ [K in keyof P & R]: ArgsOf<P[K]> } & { [K in Exclude<keyof P, R>]?: ArgsOf<P[K]> }>
              : unknown;
type Expand<T> = { [K in keyof T]: T[K] };

/** A tool whose `call` takes the arguments its `inputSchema` describes. */
export interface ToolDefinition<S> extends Omit<Tool, "inputSchema" | "call"> {
  inputSchema: S;
  call(args: ArgsOf<S>, ctx: ToolContext): Promise<Json>;
}

export function defineTool<const S extends Json>(definition: ToolDefinition<S>): Tool {
  return {
    ...definition,
    // The dispatcher has validated args against this very inputSchema before any call.
    call: (args, ctx) => definition.call(args as ArgsOf<S>, ctx),
  };
}

/** A protobuf timestamp as the RFC 3339 UTC text tools answer with ("" when absent). */
export const iso = (t: Parameters<typeof timestampDate>[0] | undefined) => (t ? timestampDate(t).toISOString() : "");
