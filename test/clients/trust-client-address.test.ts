import { randomBytes } from "node:crypto";
import { expect } from "chai";
import * as grpc from "@grpc/grpc-js";
import { bearerMd, grpcCoreSuite } from "../support/grpc-core.js";
import { grpcRefusalOf, statusName } from "../support/refusals.js";

const S = grpc.status;

/** A direct caller's claimed address is not believed: only the gateway, with its credential, may vouch for one. */
describe("core trusts no caller: the client address behind RegisterClient", () => {
  const LIMIT = 2;
  const suite = grpcCoreSuite({ registrationLimitPerMinute: LIMIT });
  const register = (md?: grpc.Metadata) =>
    suite.core.call(
      "vaultgate.grants.v1.GrantsService",
      "RegisterClient",
      {
        client_name: "Address test",
        redirect_uris: ["http://127.0.0.1:9/callback"],
        grant_types: ["authorization_code"],
        response_types: ["code"],
        token_endpoint_auth_method: "client_secret_post",
        scope: "accounts:read",
      },
      md,
    );
  const vouched = (address: string, credential = suite.stack.gatewayToken) =>
    bearerMd(undefined, { "x-vaultgate-gateway": credential, "x-vaultgate-client-address": address });
  const spoofed = (address: string) => bearerMd(undefined, { "x-vaultgate-client-address": address });

  it("believes an address only from a gateway presenting the gateway credential", async () => {
    // Direct callers claiming a different address each time still share one bucket (other
    // suites in this process may have used it already, so count successes, not which ones).
    const outcomes = [];
    for (let i = 0; i <= LIMIT; i++)
      outcomes.push(
        await register(spoofed(`198.51.100.${i + 1}`)).then(
          () => "ok",
          (e: grpc.ServiceError) => statusName(e.code),
        ),
      );
    expect(outcomes.filter((o) => o === "ok").length, outcomes.join(",")).to.be.at.most(LIMIT);
    expect(outcomes.at(-1)).to.equal("RESOURCE_EXHAUSTED");
    expect((await grpcRefusalOf(register())).code).to.equal(S.RESOURCE_EXHAUSTED);
    // A wrong gateway credential is no credential: its addresses land in the same bucket.
    expect((await grpcRefusalOf(register(vouched("203.0.113.7", randomBytes(16).toString("hex"))))).code).to.equal(S.RESOURCE_EXHAUSTED);
    expect((await grpcRefusalOf(register(vouched("203.0.113.8", suite.stack.adminToken)))).code).to.equal(S.RESOURCE_EXHAUSTED);
    // The gateway vouches: each address has its own bucket.
    for (let i = 0; i < LIMIT; i++) await register(vouched("203.0.113.10"));
    expect((await grpcRefusalOf(register(vouched("203.0.113.10")))).code).to.equal(S.RESOURCE_EXHAUSTED);
    await register(vouched("203.0.113.11"));
  });
});
