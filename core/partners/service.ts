import type { ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { PartnersService } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import type { Db } from "../db/knex.js";
import type { AuditStore } from "../audit/store.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import type { Keyring } from "../keys/keyring.js";
import type { CursorCodec } from "../paging.js";
import type { PartnersStore } from "./store.js";
import type { UsersStore } from "../identity/users-store.js";
import type { SecretHasher } from "../secrets/hasher.js";
import { createIssuanceGuards, issueToken } from "./token-issuance.js";
import type { SecretBox } from "./webhooks/signing.js";
import { createPartner, createUser, getPartner, getUserByEmail, listPartners, listUsers, rotateSecret, setEntitlements, setPartnerStatus } from "./admin.js";

export interface PartnersServiceDeps {
  db: Db;
  store: PartnersStore;
  users: UsersStore;
  audit: AuditStore;
  rateLimits: RateLimitStore;
  secrets: SecretHasher;
  /** Seals webhook signing secrets (the key outside the database). */
  webhookBox: SecretBox;
  keyring: Keyring;
  /** Signs the operator lists' cursors. */
  cursors: CursorCodec;
  clock: () => Date;
  logger: Logger;
  issuer: string;
  audience: string;
  /** 30 issuances per minute per client, failures included. */
  issuanceLimitPerMinute: number;
  /** Unregistered client ids counted one by one (default 100,000). */
  unknownClientIds?: number;
}

/**
 * Assembles PartnersService from its handlers: token issuance (token-issuance.ts) and the
 * operator's partner and user RPCs (admin.ts). Each handler takes only the dependencies it uses.
 */
export function createPartnersService(deps: PartnersServiceDeps): ServiceImpl<typeof PartnersService> {
  const { db, store, users, audit, secrets, clock, cursors } = deps;
  const issuance = {
    db,
    store,
    audit,
    clock,
    keyring: deps.keyring,
    issuer: deps.issuer,
    audience: deps.audience,
    guards: createIssuanceGuards(deps),
  };
  const admin = { db, store, audit, clock };

  return {
    issueToken: (req, ctx) => issueToken(issuance, req, ctx),

    createPartner: (req, ctx) => createPartner({ ...admin, secrets, webhookBox: deps.webhookBox }, req, ctx),
    rotateSecret: (req, ctx) => rotateSecret({ ...admin, secrets }, req, ctx),
    setPartnerStatus: (req, ctx) => setPartnerStatus(admin, req, ctx),
    setEntitlements: (req, ctx) => setEntitlements(admin, req, ctx),
    createUser: (req, ctx) => createUser({ db, users, audit, clock }, req, ctx),

    listPartners: (req) => listPartners({ store, cursors }, req),
    listUsers: (req) => listUsers({ db, users, cursors }, req),
    getUserByEmail: (req) => getUserByEmail({ db, users }, req),
    getPartner: (req) => getPartner({ store }, req),
  };
}
