import { Validator } from "@seriousme/openapi-schema-validator";
import { Ajv2020 } from "ajv/dist/2020.js";
import addFormatsModule from "ajv-formats";
import { expect } from "chai";
import type { ApiResponse } from "./resources.js";

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

type OperationDoc = {
  parameters?: { name: string; in: string; required?: boolean; schema: unknown }[];
  requestBody?: { content?: Record<string, { schema: unknown }> };
};
type Doc = { paths: Record<string, Record<string, { responses: Record<string, unknown> }>>; components: Record<string, Record<string, unknown>> };

/**
 * Checks responses against the served OpenAPI 3.1 document: the document itself against
 * the OpenAPI 3.1 meta-schema (@seriousme/openapi-schema-validator), response bodies and
 * headers against its schemas with Ajv's JSON Schema 2020-12 validator.
 */
export async function loadOpenApi(baseUrl: string) {
  const res = await fetch(`${baseUrl}/api/partner/openapi.json`);
  expect(res.status).to.equal(200);
  const doc = (await res.json()) as Doc;
  const validator = new Validator();
  const result = await validator.validate(structuredClone(doc) as unknown as Parameters<Validator["validate"]>[0]);
  expect(result.valid, JSON.stringify(result.errors)).to.equal(true);

  const ajv = new Ajv2020({ strict: false, allErrors: true });
  addFormats(ajv);
  // ajv-formats has no idn-email or iri; the document's patterns carry those rules.
  ajv.addFormat("idn-email", true);
  ajv.addFormat("iri", true);
  ajv.addSchema({ $id: "openapi", ...(doc as object) });

  function deref<T>(v: unknown): T {
    const r = v as { $ref?: string };
    if (r && typeof r.$ref === "string") {
      const path = r.$ref.replace(/^#\//, "").split("/");
      let cur: unknown = doc;
      for (const p of path) cur = (cur as Record<string, unknown>)[p];
      return deref<T>(cur);
    }
    return v as T;
  }

  function templateFor(path: string): string {
    const clean = path.split("?")[0]!;
    for (const template of Object.keys(doc.paths)) {
      const re = new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`);
      if (re.test(clean)) return template;
    }
    throw new Error(`no OpenAPI path for ${clean}`);
  }

  return {
    doc,
    /** Fails the test unless `body` matches the document's named component schema. */
    matches(schema: string, body: unknown) {
      const ok = ajv.validate({ $ref: `openapi#/components/schemas/${schema}` }, body);
      expect(ok, `${schema}: ${ajv.errorsText()} in ${JSON.stringify(body)}`).to.equal(true);
    },
    /** Whether `body` matches the document's named component schema (for expected refusals). */
    accepts(schema: string, body: unknown): boolean {
      return ajv.validate({ $ref: `openapi#/components/schemas/${schema}` }, body);
    },
    /** Whether the document's schemas accept this request: its JSON body and header parameters. */
    acceptsRequest(method: string, path: string, body: unknown, headers: Record<string, string> = {}): { ok: boolean; errors: string } {
      const op = doc.paths[templateFor(path)]![method.toLowerCase()] as unknown as OperationDoc;
      const failures: string[] = [];
      const schema = op.requestBody?.content?.["application/json"]?.schema;
      if (schema && !ajv.validate(resolveRefs(schema), body)) failures.push(`body: ${ajv.errorsText()}`);
      for (const p of op.parameters ?? []) {
        if (p.in !== "header") continue;
        const value = headers[p.name.toLowerCase()];
        if (value === undefined) {
          if (p.required) failures.push(`header ${p.name} missing`);
        } else if (!ajv.validate(resolveRefs(p.schema), value)) failures.push(`header ${p.name}: ${ajv.errorsText()}`);
      }
      return { ok: failures.length === 0, errors: failures.join("; ") };
    },
    /** Fails the test unless the response is described by the document. */
    check(method: string, path: string, res: ApiResponse) {
      const op = doc.paths[templateFor(path)]![method.toLowerCase()];
      expect(op, `${method} ${path} in OpenAPI`).to.not.equal(undefined);
      const described = op!.responses[String(res.status)];
      expect(described, `${method} ${path} ${res.status} in OpenAPI`).to.not.equal(undefined);
      const response = deref<{ headers?: Record<string, unknown>; content?: Record<string, { schema: unknown }> }>(described);
      for (const [name, h] of Object.entries(response.headers ?? {})) {
        const header = deref<{ required?: boolean; schema: unknown }>(h);
        const value = res.headers.get(name);
        if (value === null) {
          expect(header.required, `header ${name} required`).to.not.equal(true);
          continue;
        }
        const ok = ajv.validate(resolveRefs(header.schema), value);
        expect(ok, `header ${name}: ${ajv.errorsText()}`).to.equal(true);
      }
      const schema = response.content?.["application/json"]?.schema;
      if (schema) {
        const ok = ajv.validate(resolveRefs(schema), res.body);
        expect(ok, `${method} ${path} ${res.status}: ${ajv.errorsText()} in ${res.text}`).to.equal(true);
      }
    },
  };
}

/** Points document-relative refs at the registered document. */
function resolveRefs(schema: unknown): object {
  const s = schema as { $ref?: string };
  if (s && typeof s.$ref === "string" && s.$ref.startsWith("#/")) return { $ref: `openapi${s.$ref}` };
  return schema as object;
}

export type OpenApiChecker = Awaited<ReturnType<typeof loadOpenApi>>;
