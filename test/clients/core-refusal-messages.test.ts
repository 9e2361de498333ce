import { randomUUID } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import { expect } from "chai";
import { bearerMd, grpcCoreSuite } from "../support/grpc-core.js";
import { expectGrpcRefused } from "../support/refusals.js";

/**
 * A refusal that names what was wrong stays short whatever the caller sent: a gRPC status message
 * travels in a header, and a long one would reach the caller as a broken stream, not as its refusal.
 */
describe("core's port: refusal messages stay short", () => {
  const suite = grpcCoreSuite();

  const huge = "z".repeat(200_000);
  const admin = () => bearerMd(suite.stack.adminToken);

  it("an unknown entitlement of any length is INVALID_ARGUMENT naming the allowed ones (grpc-js)", async () => {
    const req = { partner_id: randomUUID(), entitlements: ["kyc:read", huge, huge] };
    const err = await expectGrpcRefused(
      suite.core.call("vaultgate.partners.v1.PartnersService", "SetEntitlements", req, admin()),
      grpc.status.INVALID_ARGUMENT,
    );
    // grpc-js decodes the status message with decodeURI, which leaves ":" and "," percent-encoded.
    const details = decodeURIComponent(err.details);
    expect(details).to.match(/^unknown entitlements: z{40}…; allowed: kyc:read, /);
    expect(details.length).to.be.at.most(512);
  });

  it("an unknown consent scope of any length is INVALID_ARGUMENT (grpc-js)", async () => {
    for (const method of ["GrantConsent", "RevokeConsent"]) {
      const req = { client_id: "gpc_none_00000000", user_id: randomUUID(), scopes: { scopes: [huge] } };
      const err = await expectGrpcRefused(suite.core.call("vaultgate.partners.v1.PartnerResourcesService", method, req, admin()), grpc.status.INVALID_ARGUMENT);
      const details = decodeURIComponent(err.details);
      expect(details, method).to.match(/^unknown consent scopes: z+…$/);
      expect(details.length, method).to.be.at.most(512);
    }
  });
});
