import { expect } from "chai";
import { getOption, type DescService } from "@bufbuild/protobuf";
import { createConnectRouter } from "@connectrpc/connect";
import { admin_only } from "../../gen/vaultgate/common/v1/options_pb.js";
import { startStack, TEST_ISSUER } from "../support/stack.js";
import { startIdp } from "../support/oidc-idp.js";
import { fixtures, generatedServices } from "../support/trust.js";
import { startGrpcCore } from "../support/grpc-core.js";
import { grpcRefusalOf, statusName } from "../support/refusals.js";

import type { Ctx, Entry } from "../support/trust-cases.js";
import { PLATFORM_TABLE } from "../support/trust-table-platform.js";
import { GRANTS_TABLE } from "../support/trust-table-grants.js";
import { IDENTITY_TABLE } from "../support/trust-table-identity.js";
import { BUDGETS_TABLE } from "../support/trust-table-budgets.js";

/**
 * Core trusts no caller: every RPC core serves has a table entry naming its credential, with a
 * positive control and the refusals (none, forged, another user's, revoked), so no new RPC ships undecided.
 */
const TABLE: Record<string, Entry> = { ...PLATFORM_TABLE, ...GRANTS_TABLE, ...IDENTITY_TABLE, ...BUDGETS_TABLE };
const services = await generatedServices();
const methodKey = (s: DescService, m: string) => `${s.typeName}/${m}`;

describe("core trusts no caller: every RPC over a real port", function () {
  this.timeout(120_000);
  const c = {} as Ctx;

  before(async () => {
    c.idp = await startIdp({ redirectUris: [`${TEST_ISSUER}/signin/oidc/callback`] });
    c.stack = await startStack({ oidc: { issuer: c.idp.issuer, clientId: c.idp.clientId, clientSecret: c.idp.clientSecret, stepUpAcr: [] } });
    c.core = await startGrpcCore(c.stack);
    c.f = fixtures(c.stack);
  });
  after(async () => {
    await c.core?.close();
    await c.stack?.close();
    await c.idp?.stop();
  });

  describe("the table", () => {
    it("covers exactly the methods core serves, and they are the generated ones", () => {
      const router = createConnectRouter();
      c.stack.core.routes(router);
      const served = router.handlers.map((h) => `${h.service.typeName}/${h.method.name}`).sort();
      const generated = services.flatMap((s) => s.methods.map((m) => methodKey(s, m.name))).sort();
      expect(
        served.filter((k) => !TABLE[k]),
        "served methods without a trust table entry",
      ).to.deep.equal([]);
      expect(
        generated.filter((k) => !TABLE[k]),
        "generated methods without a trust table entry",
      ).to.deep.equal([]);
      expect(
        Object.keys(TABLE).filter((k) => !served.includes(k)),
        "table entries core does not serve",
      ).to.deep.equal([]);
      expect(served).to.deep.equal(generated);
    });

    it("marks as admin exactly the methods whose proto says admin_only", () => {
      const mismatched = services.flatMap((s) =>
        s.methods
          .filter((m) => TABLE[methodKey(s, m.name)] && getOption(m, admin_only) !== (TABLE[methodKey(s, m.name)]!.kind === "admin"))
          .map((m) => methodKey(s, m.name)),
      );
      expect(mismatched).to.deep.equal([]);
    });

    it("has a positive control in every entry, and a refusal in every entry that takes a credential", () => {
      for (const [key, entry] of Object.entries(TABLE)) {
        expect(
          entry.cases.some((x) => x.expect === "ok"),
          `${key}: positive control`,
        ).to.equal(true);
        if (entry.kind !== "public")
          expect(
            entry.cases.some((x) => x.expect !== "ok"),
            `${key}: refusals`,
          ).to.equal(true);
      }
    });
  });

  for (const service of services) {
    describe(service.typeName, () => {
      for (const method of service.methods) {
        const key = methodKey(service, method.name);
        const entry = TABLE[key];
        describe(`${method.name} [${entry?.kind ?? "no entry"}]`, () => {
          if (!entry) {
            it("has a trust table entry", () => expect.fail(`${key} has no entry in the trust table: decide which credential it takes`));
            return;
          }
          for (const spec of entry.cases) {
            const title = spec.expect === "ok" ? `succeeds ${spec.name}` : `refuses ${spec.name} with ${statusName(spec.expect)}`;
            it(title, async () => {
              const built = await spec.build(c);
              const call = c.core.call(service.typeName, method.name, built.req, built.md);
              if (spec.expect === "ok") {
                const res = await call;
                await built.after?.(res);
              } else {
                const err = await grpcRefusalOf(call);
                expect(statusName(err.code), err.details).to.equal(statusName(spec.expect));
                await built.after?.(undefined);
              }
            });
          }
        });
      }
    });
  }
});
