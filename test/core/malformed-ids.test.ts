import { ScalarType, type DescMessage } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { expect } from "chai";
import { AuditService } from "../../gen/vaultgate/audit/v1/audit_pb.js";
import { BudgetsService } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { GrantsService } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { PartnersService } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { PartnerResourcesService } from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { TreasuryService } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { startStack, type TestStack } from "../support/stack.js";
import { createOwner, grantFor, ownerSession } from "../support/budgets.js";
import { createPartner, mintPartnerToken } from "../support/partners.js";
import { PARTNER_SCOPES } from "../../lib/vocabulary.js";
import type { CoreClients } from "../../gateways/core-clients.js";

const SERVICES = {
  audit: AuditService,
  budgets: BudgetsService,
  grants: GrantsService,
  partners: PartnersService,
  partnerResources: PartnerResourcesService,
  treasury: TreasuryService,
};

const MALFORMED = "not-an-id'\"";
const BIG = new Set([ScalarType.INT64, ScalarType.UINT64, ScalarType.SINT64, ScalarType.FIXED64, ScalarType.SFIXED64]);

/**
 * A request whose every top-level id field holds text that is no id at all, and whose numbers are a
 * plausible 5 so that the ids are what is judged; undefined when the request has no id field.
 */
function withMalformedIds(input: DescMessage): Record<string, unknown> | undefined {
  const req: Record<string, unknown> = {};
  let ids = 0;
  for (const f of input.fields) {
    if (f.oneof) continue;
    const isId = /_ids?$/.test(f.name);
    if (f.fieldKind === "list" && isId && f.listKind === "scalar" && f.scalar === ScalarType.STRING) {
      req[f.localName] = [MALFORMED];
      ids++;
    } else if (f.fieldKind === "scalar" && f.scalar === ScalarType.STRING && isId) {
      req[f.localName] = MALFORMED;
      ids++;
    } else if (f.fieldKind === "scalar" && f.scalar !== ScalarType.STRING && f.scalar !== ScalarType.BOOL && f.scalar !== ScalarType.BYTES) {
      req[f.localName] = BIG.has(f.scalar) ? 5n : 5;
    }
  }
  return ids > 0 ? req : undefined;
}

/**
 * Every unary RPC that takes an id, called by each kind of caller with ids that are not ids: each
 * call is refused as bad input (or finds nothing), never answered as a failure on our side.
 */
describe("core refuses malformed ids as input, on every RPC that takes one", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack.close());

  it("answers no RPC with internal or unknown, for the operator, an agent, a partner and a signed-in owner", async () => {
    const owner = await createOwner(stack);
    const partner = await createPartner(stack, { entitlements: [...PARTNER_SCOPES] });
    const callers: { name: string; clients: CoreClients; credential: Record<string, string> }[] = [
      { name: "operator", clients: stack.admin, credential: {} },
      { name: "agent", clients: stack.clients, credential: { accessToken: await grantFor(stack, owner, { stepUp: true }) } },
      { name: "partner", clients: stack.clients, credential: { accessToken: await mintPartnerToken(stack, partner) } },
      { name: "owner", clients: stack.clients, credential: { sessionToken: await ownerSession(stack, owner.userId, { stepUp: true }) } },
    ];
    const failures: string[] = [];
    let called = 0;
    for (const caller of callers) {
      for (const [key, service] of Object.entries(SERVICES)) {
        const client = caller.clients[key as keyof typeof SERVICES] as unknown as Record<string, (req: unknown) => Promise<unknown>>;
        for (const method of service.methods) {
          const req = method.methodKind === "unary" ? withMalformedIds(method.input) : undefined;
          const fields = new Set(method.input.fields.map((f) => f.localName));
          if (!req || !Object.keys(caller.credential).every((k) => fields.has(k))) continue;
          called++;
          try {
            await client[method.localName]!({ ...req, ...caller.credential });
          } catch (err) {
            const e = ConnectError.from(err);
            if (e.code === Code.Internal || e.code === Code.Unknown) failures.push(`${caller.name} ${service.name}.${method.name}: ${e.rawMessage}`);
          }
        }
      }
    }
    expect(called).to.be.above(40);
    expect(failures).to.deep.equal([]);
  });
});
