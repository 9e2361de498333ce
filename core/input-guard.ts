import { ScalarType, type DescField, type DescMessage } from "@bufbuild/protobuf";
import type { Interceptor } from "@connectrpc/connect";
import { Reason } from "../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "./errors.js";
import { textProblem } from "../lib/text.js";

/**
 * Refuses NUL and unpaired surrogates, which PostgreSQL text and json cannot hold, because the
 * in-process transport passes JS strings unchecked. String fields are found once per message type.
 */
export function inputGuard(): Interceptor {
  return (next) => (req) => {
    if (!req.stream) {
      const found = findBadText(req.method.input, req.message as unknown as Record<string, unknown>, "");
      if (found) fail(Reason.INVALID_REQUEST, `${found.path} ${found.problem}`);
    }
    return next(req);
  };
}

type Walk = { field: DescField; oneof?: string };
const plans = new WeakMap<DescMessage, Walk[]>();

/** The fields of `desc` that can hold a string, directly or below. */
function planOf(desc: DescMessage, visiting = new Set<DescMessage>()): Walk[] {
  const cached = plans.get(desc);
  if (cached) return cached;
  visiting.add(desc);
  const walk: Walk[] = [];
  for (const field of desc.fields) {
    if (holdsText(field, visiting)) walk.push({ field, oneof: field.oneof?.localName });
  }
  visiting.delete(desc);
  plans.set(desc, walk);
  return walk;
}

function holdsText(field: DescField, visiting: Set<DescMessage>): boolean {
  const nested = (m: DescMessage) => visiting.has(m) || planOf(m, visiting).length > 0;
  switch (field.fieldKind) {
    case "scalar":
      return field.scalar === ScalarType.STRING;
    case "enum":
      return false;
    case "message":
      return nested(field.message);
    case "list":
      return field.listKind === "scalar" ? field.scalar === ScalarType.STRING : field.listKind === "message" && nested(field.message);
    case "map":
      return (
        field.mapKey === ScalarType.STRING ||
        (field.mapKind === "scalar" ? field.scalar === ScalarType.STRING : field.mapKind === "message" && nested(field.message))
      );
  }
}

type Found = { path: string; problem: string };

/** The first string in `msg` (a message of type `desc`) that is not acceptable text. */
export function findBadText(desc: DescMessage, msg: Record<string, unknown> | undefined, path: string): Found | undefined {
  if (!msg || typeof msg !== "object") return undefined;
  for (const { field, oneof } of planOf(desc)) {
    let value: unknown;
    if (oneof) {
      const o = msg[oneof] as { case?: string; value?: unknown } | undefined;
      if (!o || o.case !== field.localName) continue;
      value = o.value;
    } else value = msg[field.localName];
    if (value === undefined || value === null) continue;
    const at = path ? `${path}.${field.name}` : field.name;
    const found = checkValue(field, value, at);
    if (found) return found;
  }
  return undefined;
}

function checkValue(field: DescField, value: unknown, at: string): Found | undefined {
  switch (field.fieldKind) {
    case "scalar":
      return checkString(value, at);
    case "message":
      return findBadText(field.message, value as Record<string, unknown>, at);
    case "list": {
      if (!Array.isArray(value)) return undefined;
      for (let i = 0; i < value.length; i++) {
        const found =
          field.listKind === "message" ? findBadText(field.message, value[i] as Record<string, unknown>, `${at}[${i}]`) : checkString(value[i], `${at}[${i}]`);
        if (found) return found;
      }
      return undefined;
    }
    case "map": {
      if (typeof value !== "object") return undefined;
      for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
        if (field.mapKey === ScalarType.STRING) {
          const problem = textProblem(k);
          if (problem) return { path: `${at} (a key)`, problem };
        }
        const found =
          field.mapKind === "message"
            ? findBadText(field.message, v as Record<string, unknown>, `${at}[${JSON.stringify(k)}]`)
            : field.mapKind === "scalar"
              ? checkString(v, `${at}[${JSON.stringify(k)}]`)
              : undefined;
        if (found) return found;
      }
      return undefined;
    }
    default:
      return undefined;
  }
}

function checkString(value: unknown, at: string): Found | undefined {
  if (typeof value !== "string") return undefined;
  const problem = textProblem(value);
  return problem ? { path: at, problem } : undefined;
}
