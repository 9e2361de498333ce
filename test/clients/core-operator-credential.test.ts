import * as grpc from "@grpc/grpc-js";
import { expect } from "chai";
import { uniqueSlug } from "../support/stack.js";
import { requirePostgres } from "../support/db.js";
import { bearerMd, grpcCoreSuite } from "../support/grpc-core.js";
import { grpcRefusalOf, statusName } from "../support/refusals.js";

/** The operator credential, read however its scheme is written, decides each call alone, under load too. */
const PARTNERS = "vaultgate.partners.v1.PartnersService";

describe("core's port: the operator credential under concurrent calls", () => {
  const suite = grpcCoreSuite();

  it("PostgreSQL only: 120 concurrent user creations, half with a near-miss credential, create exactly the operator's", async function () {
    requirePostgres(this, "concurrent writes on the shared database");
    const good = (i: number) => i % 2 === 0;
    const headerOf = (i: number) => {
      const token = good(i) ? suite.stack.adminToken : `${suite.stack.adminToken.slice(0, -1)}${suite.stack.adminToken.endsWith("A") ? "B" : "A"}`;
      const md = bearerMd();
      md.set("authorization", `${["bearer", "BEARER", "Bearer"][i % 3]}  ${token}`);
      // A forged gateway credential and address change nothing.
      md.set("x-vaultgate-gateway", "not-the-gateway-token-at-all");
      md.set("x-vaultgate-client-address", "203.0.113.7");
      return md;
    };
    const emails = Array.from({ length: 120 }, () => `${uniqueSlug()}@example.com`);
    const create = (email: string, i: number) => suite.core.call(PARTNERS, "CreateUser", { email }, headerOf(i));
    const outcomes = await Promise.all(
      emails.map((email, i) => (good(i) ? create(email, i).then(() => "OK") : grpcRefusalOf(create(email, i)).then((e) => statusName(e.code)))),
    );
    expect(outcomes.filter((o, i) => o !== (good(i) ? "OK" : statusName(grpc.status.UNAUTHENTICATED)))).to.deep.equal([]);
    for (const [i, email] of emails.entries()) {
      const found = suite.core.call(PARTNERS, "GetUserByEmail", { email }, bearerMd(suite.stack.adminToken));
      if (good(i)) expect(((await found).user as { email: string }).email).to.equal(email);
      else expect(statusName((await grpcRefusalOf(found)).code)).to.equal("NOT_FOUND");
    }
  });
});
