import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import { isDateTime } from "./date-time.js";
import type { Tool } from "./tools.js";
import { UUID } from "../../lib/uuid.js";
import { findBadText } from "../shared/text.js";
import { DISPLAY_NAME } from "./tools/kit.js";

/** Ajv for the JSON Schema 2020-12 dialect, with date-time exactly as date-time.ts defines it. */
export function createSchemaAjv(): Ajv2020 {
  // Ajv's minLength/maxLength count code points (always, in Ajv 8), as the documented limits mean.
  const ajv = new Ajv2020({ strict: true, allErrors: true, strictTypes: false });
  ajv.addFormat("date-time", { type: "string", validate: isDateTime });
  ajv.addFormat("uuid", { type: "string", validate: (s: string) => UUID.test(s) });
  ajv.addFormat("uri", {
    type: "string",
    validate: (s: string) => {
      try {
        return Boolean(new URL(s).protocol);
      } catch {
        return false;
      }
    },
  });
  return ajv;
}

export interface ToolValidators {
  input: ValidateFunction;
  output: ValidateFunction;
}

/** Compiles every tool's schemas once, at startup (a bad schema fails the boot, not a call). */
export function compileToolSchemas(tools: readonly Tool[]): Map<string, ToolValidators> {
  const ajv = createSchemaAjv();
  return new Map(tools.map((t) => [t.name, { input: withTextRules(ajv.compile(t.inputSchema)), output: ajv.compile(t.outputSchema) }]));
}

/**
 * The tool's input schema, plus the text rules every argument obeys: no NUL and no
 * unpaired surrogate in any string or property name (-32602 naming the path).
 */
function withTextRules(schema: ValidateFunction): ValidateFunction {
  const validate = ((data: unknown) => {
    const bad = findBadText(data);
    if (bad) {
      validate.errors = [{ instancePath: pointer(bad.path), schemaPath: "#", keyword: "text", params: {}, message: bad.problem }];
      return false;
    }
    const ok = schema(data);
    // A numeral JSON.parse would change arrives as NaN: "must be integer" would puzzle its sender.
    validate.errors = schema.errors?.map((e) => (e.keyword === "type" && Number.isNaN(at(data, e.instancePath)) ? { ...e, message: INEXACT } : e));
    return ok;
  }) as ValidateFunction;
  validate.schema = schema.schema;
  validate.schemaEnv = schema.schemaEnv;
  return validate;
}

const INEXACT = "cannot be carried exactly as a JSON number: send an integer within ±(2^53-1)";

/** The value at a JSON Pointer (Ajv's instancePath) in parsed JSON. */
function at(data: unknown, path: string): unknown {
  let value = data;
  for (const part of path.split("/").slice(1)) {
    if (value === null || typeof value !== "object") return undefined;
    value = (value as Record<string, unknown>)[part.replace(/~1/g, "/").replace(/~0/g, "~")];
  }
  return value;
}

/** `a.b[2]` as a JSON Pointer (`/a/b/2`), the way data.errors names places. */
function pointer(path: string): string {
  if (path === "the body") return "/";
  return (
    "/" +
    path
      .replace(/\[(\d+)\]/g, ".$1")
      .split(".")
      .filter(Boolean)
      .map((s) => s.replace(/~/g, "~0").replace(/\//g, "~1"))
      .join("/")
  );
}

/** Validation errors as they appear in `data.errors`: where, and what failed. */
export function describeErrors(errors: ErrorObject[] | null | undefined): { path: string; message: string }[] {
  return (errors ?? []).slice(0, 20).map((e) => ({
    path: e.instancePath || "/",
    message:
      e.keyword === "additionalProperties"
        ? `unknown property ${(e.params as { additionalProperty: string }).additionalProperty}`
        : e.keyword === "pattern" && (e.params as { pattern: string }).pattern === DISPLAY_NAME.pattern
          ? "must hold no control characters, line separators or bidirectional controls, and not be blank"
          : (e.message ?? e.keyword),
  }));
}
