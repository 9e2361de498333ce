import { randomBytes, randomUUID } from "node:crypto";
import { expect } from "chai";
import { PartnerStatus } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { uniqueSlug } from "./stack.js";
import { bearerMd } from "./grpc-core.js";
import { batchRequest, bindTreasury } from "./treasury.js";

import { admin, partner, ok, refused, consentingUser, S, type Ctx, type Entry } from "./trust-cases.js";

/** The reflection response's service list (see WireResponse in ./trust.ts for how it is decoded). */
type ServicesRes = { list_services_response: { service: { name: string }[] } };

/** Trust table entries of health, reflection, audit, partners and treasury. */
export const PLATFORM_TABLE: Record<string, Entry> = {
  // grpc.health.v1.Health: public.
  "grpc.health.v1.Health/Check": {
    kind: "public",
    cases: [ok("without any credential", async () => ({ req: { service: "" }, after: (res) => void expect(res!.status).to.equal("SERVING") }))],
  },
  "grpc.health.v1.Health/List": {
    kind: "public",
    cases: [
      ok("without any credential", async () => ({
        req: {},
        after: (res) => void expect((res as { statuses: object }).statuses).to.have.property("vaultgate.database"),
      })),
    ],
  },
  "grpc.health.v1.Health/Watch": {
    kind: "public",
    cases: [ok("without any credential", async () => ({ req: { service: "" }, after: (res) => void expect(res!.status).to.equal("SERVING") }))],
  },

  // grpc.reflection.v1 / v1alpha ServerReflection: public. It only describes the services;
  // each described RPC keeps its own credential (the admin_only ones are refused above).
  "grpc.reflection.v1.ServerReflection/ServerReflectionInfo": {
    kind: "public",
    cases: [
      ok("without any credential", async () => ({
        req: { list_services: "" },
        after: (res) => void expect((res as ServicesRes).list_services_response.service.map((s) => s.name)).to.include("vaultgate.grants.v1.GrantsService"),
      })),
    ],
  },
  "grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo": {
    kind: "public",
    cases: [
      ok("without any credential", async () => ({
        req: { list_services: "" },
        after: (res) => void expect((res as ServicesRes).list_services_response.service.map((s) => s.name)).to.include("vaultgate.audit.v1.AuditService"),
      })),
    ],
  },

  // vaultgate.audit.v1.AuditService: admin.
  "vaultgate.audit.v1.AuditService/ListRecords": admin(() => ({ limit: 5 })),
  "vaultgate.audit.v1.AuditService/VerifyLedger": admin(() => ({})),
  "vaultgate.audit.v1.AuditService/VerifyChains": admin(() => ({})),
  "vaultgate.audit.v1.AuditService/TailRecords": admin(async (c) => {
    // A partner token issuance writes an audit record, so the tail has one to stream.
    await c.f.partner();
    return { since: "0" };
  }),

  // vaultgate.partners.v1.PartnersService.
  "vaultgate.partners.v1.PartnersService/IssueToken": {
    kind: "client",
    cases: [
      ok("with the partner's client secret", async (c) => {
        const p = await c.f.partner();
        return {
          req: { client_id: p.clientId, client_secret: p.clientSecret, scope: "kyc:read" },
          after: (res) => void expect(res!.token_type).to.equal("Bearer"),
        };
      }),
      refused("without a client secret", S.UNAUTHENTICATED, async (c) => ({ req: { client_id: (await c.f.partner()).clientId, client_secret: "" } })),
      refused("with the operator credential and no secret", S.UNAUTHENTICATED, async (c) => ({
        req: { client_id: (await c.f.partner()).clientId, client_secret: "" },
        md: bearerMd(c.stack.adminToken),
      })),
      refused("with a wrong secret", S.UNAUTHENTICATED, async (c) => ({
        req: { client_id: (await c.f.partner()).clientId, client_secret: `gps_${randomBytes(32).toString("base64url")}` },
      })),
      refused("with another partner's secret", S.UNAUTHENTICATED, async (c) => ({
        req: { client_id: (await c.f.partner()).clientId, client_secret: (await c.f.partner()).clientSecret },
      })),
      refused("with a rotated-away secret", S.UNAUTHENTICATED, async (c) => {
        const p = await c.f.partner();
        await c.stack.admin.partners.rotateSecret({ clientId: p.clientId });
        return { req: { client_id: p.clientId, client_secret: p.clientSecret } };
      }),
      refused("for a suspended partner", S.PERMISSION_DENIED, async (c) => {
        const p = await c.f.partner();
        await c.stack.admin.partners.setPartnerStatus({ clientId: p.clientId, status: PartnerStatus.SUSPENDED });
        return { req: { client_id: p.clientId, client_secret: p.clientSecret } };
      }),
    ],
  },
  "vaultgate.partners.v1.PartnersService/CreatePartner": admin(() => ({ name: "Trust partner", slug: uniqueSlug() })),
  "vaultgate.partners.v1.PartnersService/RotateSecret": admin(async (c) => ({ client_id: (await c.f.partner()).clientId })),
  "vaultgate.partners.v1.PartnersService/SetPartnerStatus": admin(async (c) => ({
    client_id: (await c.f.partner()).clientId,
    status: "PARTNER_STATUS_SUSPENDED",
  })),
  "vaultgate.partners.v1.PartnersService/SetEntitlements": admin(async (c) => ({ client_id: (await c.f.partner()).clientId, entitlements: ["kyc:read"] })),
  "vaultgate.partners.v1.PartnersService/GetPartner": admin(async (c) => ({ client_id: (await c.f.partner()).clientId })),
  "vaultgate.partners.v1.PartnersService/CreateUser": admin(() => ({ email: `tb-${randomUUID()}@example.test` })),
  "vaultgate.partners.v1.PartnersService/ListPartners": admin(() => ({ limit: 5 })),
  "vaultgate.partners.v1.PartnersService/ListUsers": admin(() => ({ limit: 5 })),
  "vaultgate.partners.v1.PartnersService/GetUserByEmail": admin(async (c) => ({ email: (await c.f.user()).email })),

  // vaultgate.partners.v1.PartnerResourcesService: partner token; admin for the operator commands.
  "vaultgate.partners.v1.PartnerResourcesService/AuthorizePartner": partner((t, u: string) => ({ access_token: t, user_id: u, scope: "kyc:read" }), {
    setup: (c, p) => consentingUser(c, p),
    scope: "kyc:read",
    namesUser: true,
  }),
  "vaultgate.partners.v1.PartnerResourcesService/PreCreateUser": partner((t) => ({ access_token: t, email: `tb-${randomUUID()}@example.test` })),
  "vaultgate.partners.v1.PartnerResourcesService/GetKycStatus": partner((t, u: string) => ({ access_token: t, user_id: u }), {
    setup: (c, p) => consentingUser(c, p),
    scope: "kyc:read",
    namesUser: true,
  }),
  "vaultgate.partners.v1.PartnerResourcesService/CreateKycLink": partner(
    (t, u: string) => ({ access_token: t, user_id: u, redirect_uri: "https://partner.example/done" }),
    {
      setup: (c, p) => consentingUser(c, p),
      scope: "kyc:read",
      namesUser: true,
    },
  ),
  "vaultgate.partners.v1.PartnerResourcesService/ListWallets": partner((t, u: string) => ({ access_token: t, user_id: u }), {
    setup: (c, p) => consentingUser(c, p),
    scope: "wallet:read",
    namesUser: true,
  }),
  "vaultgate.partners.v1.PartnerResourcesService/GetUsAccount": partner((t, u: string) => ({ access_token: t, user_id: u }), {
    setup: (c, p) => consentingUser(c, p),
    scope: "us_account:read",
    namesUser: true,
  }),
  "vaultgate.partners.v1.PartnerResourcesService/ListTransfers": partner((t, u: string) => ({ access_token: t, user_id: u }), {
    setup: (c, p) => consentingUser(c, p),
    scope: "transfers:read",
    namesUser: true,
  }),
  "vaultgate.partners.v1.PartnerResourcesService/ListEvents": partner((t) => ({ access_token: t })),
  "vaultgate.partners.v1.PartnerResourcesService/SetKycStatus": admin(async (c) => ({
    user_id: (await c.f.user()).userId,
    status: "pending",
    provider: "sandbox",
  })),
  "vaultgate.partners.v1.PartnerResourcesService/SetUserStatus": admin(async (c) => ({ user_id: (await c.f.user()).userId, status: "active" })),
  "vaultgate.partners.v1.PartnerResourcesService/SetUserEmail": setUserEmailEntry(),
  "vaultgate.partners.v1.PartnerResourcesService/AddWallet": admin(async (c) => ({
    user_id: (await c.f.user()).userId,
    chain: "base",
    address: "0xabc0000000000000000000000000000000000002",
  })),
  "vaultgate.partners.v1.PartnerResourcesService/ProvisionUsAccount": admin(async (c) => ({ user_id: (await c.f.user()).userId })),
  "vaultgate.partners.v1.PartnerResourcesService/GrantConsent": admin(async (c) => ({
    client_id: (await c.f.partner()).clientId,
    user_id: (await c.f.user()).userId,
  })),
  "vaultgate.partners.v1.PartnerResourcesService/RevokeConsent": admin(async (c) => {
    const p = await c.f.partner();
    return { client_id: p.clientId, user_id: await consentingUser(c, p) };
  }),
  "vaultgate.partners.v1.PartnerResourcesService/RecordLedgerEntry": admin(async (c) => ({
    user_id: (await c.f.user()).userId,
    direction: "credit",
    amount_cents: "100",
    currency: "USD",
  })),
  "vaultgate.partners.v1.PartnerResourcesService/SetWebhook": admin(async (c) => ({ client_id: (await c.f.partner()).clientId, url: "" })),

  // vaultgate.treasury.v1.TreasuryService.
  "vaultgate.treasury.v1.TreasuryService/BindTreasury": admin(async (c) => ({
    client_id: (await c.f.partner()).clientId,
    payer_entity_id: randomUUID(),
    balance_cents: "1000",
    currency: "USD",
  })),
  "vaultgate.treasury.v1.TreasuryService/SetTreasuryStatus": admin(async (c) => {
    const p = await c.f.partner();
    await bindTreasury(c.stack.admin, p);
    return { client_id: p.clientId, status: "TREASURY_STATUS_SUSPENDED" };
  }),
  "vaultgate.treasury.v1.TreasuryService/FundTreasury": admin(async (c) => {
    const p = await c.f.partner();
    await bindTreasury(c.stack.admin, p);
    return { client_id: p.clientId, amount_cents: "100" };
  }),
  "vaultgate.treasury.v1.TreasuryService/GetTreasury": partner((t) => ({ access_token: t }), {
    setup: async (c, p) => void (await bindTreasury(c.stack.admin, p)),
    scope: "treasury:write",
  }),
  "vaultgate.treasury.v1.TreasuryService/ExecuteBatch": partner(
    (t, fx: { payer: string; recipient: string }) => {
      const r = batchRequest({ token: t }, fx.payer, [{ recipientUserId: fx.recipient }]);
      return {
        access_token: r.accessToken,
        idempotency_key: r.idempotencyKey,
        payer_entity_id: r.payerEntityId,
        items: r.items.map((i) => ({
          execution_id: i.executionId,
          payout_id: i.payoutId,
          recipient_user_id: i.recipientUserId,
          amount_cents: String(i.amountCents),
          currency: i.currency,
          reference: i.reference,
        })),
      };
    },
    {
      setup: async (c, p) => ({ payer: await bindTreasury(c.stack.admin, p), recipient: await consentingUser(c, p, ["payouts:receive"]) }),
      scope: "treasury:write",
    },
  ),
  "vaultgate.treasury.v1.TreasuryService/GetPayout": partner(
    (t, fx: { recipient: string; payoutId: string }) => ({ access_token: t, user_id: fx.recipient, payout_id: fx.payoutId }),
    {
      setup: async (c, p) => {
        const payer = await bindTreasury(c.stack.admin, p);
        const recipient = await consentingUser(c, p, ["payouts:receive"]);
        const req = batchRequest(p, payer, [{ recipientUserId: recipient }]);
        await c.stack.clients.treasury.executeBatch(req);
        return { recipient, payoutId: req.items[0]!.payoutId };
      },
      scope: "payouts:receive",
      namesUser: true,
    },
  ),
};

/** The operator's e-mail change: the admin cases, and the credentials of everyone else, each leaving the address as it was. */
function setUserEmailEntry(): Entry {
  const entry = admin(async (c) => ({ user_id: (await c.f.user()).userId, email: `${uniqueSlug()}@example.test` }));
  const unchanged = (c: Ctx, user: { userId: string; email: string }) => async () => {
    expect((await c.stack.admin.partners.getUserByEmail({ email: user.email })).user!.userId).to.equal(user.userId);
  };
  const hostile = (name: string, credential: (c: Ctx, user: { userId: string; email: string; vaultId: string }) => Promise<string>) =>
    refused(name, S.UNAUTHENTICATED, async (c) => {
      const user = await c.f.user();
      return { req: { user_id: user.userId, email: `${uniqueSlug()}@example.test` }, md: bearerMd(await credential(c, user)), after: unchanged(c, user) };
    });
  entry.cases.push(
    hostile("with a partner's access token", async (c) => (await c.f.partner()).token),
    hostile("with the user's own agent grant", async (c, user) => (await c.f.grant(user, { stepUp: true })).accessToken),
    hostile("with the user's own web session", async (c, user) => c.f.session(user)),
  );
  return entry;
}
