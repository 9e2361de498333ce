import { expect } from "chai";
import fc from "fast-check";
import type { DescField, DescMessage, DescService } from "@bufbuild/protobuf";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { AuditService } from "../../gen/vaultgate/audit/v1/audit_pb.js";
import { BudgetsService } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { GrantsService } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { PartnersService } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { PartnerResourcesService } from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { TreasuryService } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { connectJson } from "../support/connect-json.js";
import { FUZZ } from "../support/fuzz.js";
import { ownDatabase } from "../support/db.js";
import { startStack, type TestStack } from "../support/stack.js";

/**
 * Core trusts no caller, the operator included: every unary RPC on core's real port, sent
 * Connect JSON built from its request message with hostile values, answers a clear code, never
 * `internal` or `unknown`. A database of its own: operator RPCs here change whatever they name.
 */
describe("hostile requests to every core RPC on its real port: never an internal error", function () {
  this.timeout(600_000);
  const { runs: RUNS, seed: SEED } = FUZZ;
  let database: Awaited<ReturnType<typeof ownDatabase>>;
  let stack: TestStack;
  let server: CoreServer;

  before(async () => {
    database = await ownDatabase();
    stack = await startStack({ database: database.db });
    server = await startCoreServer(stack.core, 0, "127.0.0.1");
  });
  after(async () => {
    await server?.close();
    await stack?.close();
    await database?.drop();
  });

  const nastyString = fc.oneof(
    fc.string({ maxLength: 30 }),
    fc.constantFrom("", " ", "\u0000", "0x", "base", "USD", "USDC", "active", "accounts:read", "-1", "1e309", "2026-13-40T00:00:00Z"),
    fc.constantFrom("a".repeat(5000), "00000000-0000-0000-0000-000000000000", "x@example.com", "https://127.0.0.1:1/cb"),
    fc.uuid(),
  );
  const int64 = fc.oneof(fc.bigInt({ min: -(2n ** 63n), max: 2n ** 63n - 1n }).map(String), fc.integer(), fc.constantFrom("0", "-1", "9007199254740993"));
  const timestamp = fc.oneof(
    fc.date({ min: new Date("0001-01-01T00:00:00Z"), max: new Date("9999-12-31T23:59:59Z"), noInvalidDate: true }).map((d) => d.toISOString()),
    nastyString,
  );

  /** A JSON value for one field: mostly of its type, so the handler runs, sometimes of any type. */
  function fieldValue(field: DescField, depth: number): fc.Arbitrary<unknown> {
    const one = (): fc.Arbitrary<unknown> => {
      if (field.fieldKind === "message") return messageOf(field.message, depth + 1);
      if (field.fieldKind === "enum") return fc.oneof(fc.constantFrom(...field.enum.values.map((v) => v.name)), fc.integer({ min: -1, max: 9 }));
      if (field.fieldKind === "map") return fc.dictionary(nastyString, nastyString, { maxKeys: 3 });
      if (field.fieldKind === "list") {
        const item =
          field.listKind === "message"
            ? messageOf(field.message, depth + 1)
            : field.listKind === "enum"
              ? fc.constantFrom(...field.enum.values.map((v) => v.name))
              : scalar(field.scalar);
        return fc.array(item, { maxLength: 4 });
      }
      return scalar(field.scalar);
    };
    return fc.oneof({ weight: 14, arbitrary: one() }, { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) });
  }
  function scalar(kind: number): fc.Arbitrary<unknown> {
    // ScalarType: 8 bool, 9 string, 12 bytes; 1, 2 floating; 3, 4, 6, 16, 18 the 64-bit integers.
    if (kind === 8) return fc.boolean();
    if (kind === 9) return nastyString;
    if (kind === 12) return fc.base64String({ maxLength: 64 });
    if (kind === 1 || kind === 2) return fc.double();
    if ([3, 4, 6, 16, 18].includes(kind)) return int64;
    return fc.integer();
  }
  function messageOf(message: DescMessage, depth: number): fc.Arbitrary<unknown> {
    if (message.typeName === "google.protobuf.Timestamp") return timestamp;
    if (depth > 3) return fc.constant({});
    return fc.record(Object.fromEntries(message.fields.map((f) => [f.jsonName, fieldValue(f, depth)])), { requiredKeys: [] });
  }

  const services: DescService[] = [GrantsService, BudgetsService, PartnersService, PartnerResourcesService, TreasuryService, AuditService];
  const methods = services.flatMap((s) => s.methods.filter((m) => m.methodKind === "unary").map((m) => ({ path: `/${s.typeName}/${m.name}`, input: m.input })));

  it("as the operator and as a stranger", async () => {
    expect(methods.length).to.be.greaterThan(40);
    for (const m of methods) {
      await fc.assert(
        fc.asyncProperty(messageOf(m.input, 0), fc.boolean(), async (body, operator) => {
          const headers: Record<string, string> = operator ? { authorization: `Bearer ${stack.adminToken}` } : {};
          const r = await connectJson(server.url, m.path, JSON.stringify(body), headers);
          const what = `${m.path} ${operator ? "operator" : "stranger"} ${JSON.stringify(body).slice(0, 400)}: ${JSON.stringify(r.body).slice(0, 300)}`;
          expect(["internal", "unknown"], what).to.not.include(r.body.code);
          expect(r.status, what).to.not.equal(500);
        }),
        { numRuns: RUNS, seed: SEED },
      );
    }
    expect(stack.logs.lines.filter((l) => JSON.parse(l).level >= 50)).to.deep.equal([]);
  });
});
