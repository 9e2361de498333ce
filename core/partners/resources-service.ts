import type { ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { PartnerResourcesService } from "../../gen/vaultgate/partners/v1/resources_pb.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { CursorCodec } from "../paging.js";
import type { PartnerAccess } from "./access.js";
import type { PartnersStore } from "./store.js";
import type { ResourcesStore } from "./resources-store.js";
import type { UsersStore } from "../identity/users-store.js";
import type { SignInStore } from "../identity/signin-store.js";
import type { Mailer } from "../identity/mail/mailer.js";
import type { KycProvider } from "./kyc-providers.js";
import type { OutboxStore } from "./webhooks/outbox-store.js";
import type { SecretBox } from "./webhooks/signing.js";
import { authorizePartner, grantConsent, preCreateUser, revokeConsent, setUserStatus } from "./resources-users.js";
import { setUserEmail } from "./resources-user-email.js";
import { createKycLink, getKycStatus, setKycStatus } from "./resources-kyc.js";
import { addWallet, getUsAccount, listTransfers, listWallets, provisionUsAccount, recordLedgerEntry } from "./resources-accounts.js";
import { listEvents, setWebhook } from "./resources-webhooks.js";

export interface PartnerResourcesDeps {
  db: Db;
  access: PartnerAccess;
  partners: PartnersStore;
  users: UsersStore;
  signIn: SignInStore;
  /** Unsent code mails are dropped when an account change ends the user's sign-ins. */
  mail: Pick<Mailer, "withdrawCodes">;
  resources: ResourcesStore;
  outbox: OutboxStore;
  audit: AuditStore;
  cursors: CursorCodec;
  box: SecretBox;
  kycProviders: KycProvider[];
  /** The provider used when a link request names none. */
  defaultKycProvider: string;
  clock: () => Date;
  logger: Logger;
}

/**
 * Assembles PartnerResourcesService from its handlers: users and consents (resources-users.ts),
 * KYC (resources-kyc.ts), wallets, accounts and transfers (resources-accounts.ts), and events and
 * webhooks (resources-webhooks.ts). Each handler takes only the dependencies it uses.
 */
export function createPartnerResourcesService(deps: PartnerResourcesDeps): ServiceImpl<typeof PartnerResourcesService> {
  const kyc = { ...deps, providers: new Map(deps.kycProviders.map((p) => [p.name, p])) };

  return {
    authorizePartner: (req, ctx) => authorizePartner(deps, req, ctx),
    preCreateUser: (req, ctx) => preCreateUser(deps, req, ctx),
    setUserStatus: (req, ctx) => setUserStatus(deps, req, ctx),
    setUserEmail: (req, ctx) => setUserEmail(deps, req, ctx),
    grantConsent: (req, ctx) => grantConsent(deps, req, ctx),
    revokeConsent: (req, ctx) => revokeConsent(deps, req, ctx),

    getKycStatus: (req, ctx) => getKycStatus(deps, req, ctx),
    createKycLink: (req, ctx) => createKycLink(kyc, req, ctx),
    setKycStatus: (req, ctx) => setKycStatus(deps, req, ctx),

    listWallets: (req, ctx) => listWallets(deps, req, ctx),
    getUsAccount: (req, ctx) => getUsAccount(deps, req, ctx),
    listTransfers: (req, ctx) => listTransfers(deps, req, ctx),
    addWallet: (req, ctx) => addWallet(deps, req, ctx),
    provisionUsAccount: (req, ctx) => provisionUsAccount(deps, req, ctx),
    recordLedgerEntry: (req, ctx) => recordLedgerEntry(deps, req, ctx),

    listEvents: (req, ctx) => listEvents(deps, req, ctx),
    setWebhook: (req, ctx) => setWebhook(deps, req, ctx),
  };
}
