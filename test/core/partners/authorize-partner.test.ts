import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { expectRefused } from "../../support/refusals.js";

describe("PartnerResourcesService.AuthorizePartner (the checks treasury reuses)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ webhookPollMs: 0 });
  });
  after(() => stack.close());

  it("answers the principal, and refuses in the documented order", async () => {
    const partner = await createPartner(stack, { entitlements: ["payouts:receive", "treasury:write"] });
    const { userId } = await createUserFor(stack, partner, ["payouts:receive"]);
    const { accessToken: token } = await stack.clients.partners.issueToken({ clientId: partner.clientId, clientSecret: partner.clientSecret });
    const rpc = stack.clients.partnerResources;

    const ok = await rpc.authorizePartner({ accessToken: token });
    expect(ok).to.include({ partnerId: partner.partnerId, clientId: partner.clientId });
    expect(ok.tokenScopes).to.deep.equal(["payouts:receive", "treasury:write"]);
    expect((await rpc.authorizePartner({ accessToken: token, userId, scope: "payouts:receive" })).clientId).to.equal(partner.clientId);
    // treasury:write is in the token but is never consent.
    await expectRefused(rpc.authorizePartner({ accessToken: token, userId, scope: "treasury:write" }), Reason.GRANT_REQUIRED);
    await expectRefused(rpc.authorizePartner({ accessToken: token, userId: crypto.randomUUID(), scope: "payouts:receive" }), Reason.USER_NOT_FOUND);
    await expectRefused(rpc.authorizePartner({ accessToken: "x" }), Reason.INVALID_TOKEN);
    await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.SUSPENDED });
    await expectRefused(rpc.authorizePartner({ accessToken: token, userId: crypto.randomUUID(), scope: "payouts:receive" }), Reason.PARTNER_INACTIVE);
  });

  it("counts exactly to the limit across rate-limit shards", async () => {
    const limited = await startStack({ webhookPollMs: 0, resourceRateLimits: { authorize: 200 } });
    try {
      const partner = await createPartner(limited);
      const { accessToken } = await limited.clients.partners.issueToken({ clientId: partner.clientId, clientSecret: partner.clientSecret });
      for (let i = 0; i < 200; i++) await limited.clients.partnerResources.authorizePartner({ accessToken });
      await expectRefused(limited.clients.partnerResources.authorizePartner({ accessToken }), Reason.RATE_LIMITED);
    } finally {
      await limited.close();
    }
  });

  it("refuses a scope that is none of ours under one rate-limit key: long or varied, never a 5xx nor a fresh window", async () => {
    const limited = await startStack({ webhookPollMs: 0, resourceRateLimits: { default: 4 } });
    try {
      const partner = await createPartner(limited, { entitlements: ["kyc:read"] });
      const { userId } = await createUserFor(limited, partner, ["kyc:read"]);
      const { accessToken } = await limited.clients.partners.issueToken({ clientId: partner.clientId, clientSecret: partner.clientSecret });
      const rpc = limited.clients.partnerResources;
      // Random text does not compress: as a key of its own it would not fit an index entry.
      await expectRefused(rpc.authorizePartner({ accessToken, userId, scope: randomBytes(3000).toString("base64") }), Reason.GRANT_REQUIRED);
      for (let i = 0; i < 3; i++) await expectRefused(rpc.authorizePartner({ accessToken, userId, scope: `made-up-${i}` }), Reason.GRANT_REQUIRED);
      await expectRefused(rpc.authorizePartner({ accessToken, userId, scope: "made-up-3" }), Reason.RATE_LIMITED);
      // A scope of ours keeps its own count.
      expect((await rpc.authorizePartner({ accessToken, userId, scope: "kyc:read" })).partnerId).to.equal(partner.partnerId);
    } finally {
      await limited.close();
    }
  });
});
