import type { ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import type { GrantsService } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import type { Keyring } from "../keys/keyring.js";
import { getJwks, retireSigningKey, rotateSigningKey } from "../keys/admin.js";
import type { AuditStore } from "../audit/store.js";
import type { Db } from "../db/knex.js";
import type { SecretHasher } from "../secrets/hasher.js";
import type { RateLimitStore } from "../rate-limits/store.js";
import type { HostResolver } from "../net/resolver.js";
import { endSession, getSession, type SessionVerifier } from "../identity/sessions.js";
import { continueSignOut, createSignOutHandoffs } from "../identity/signout-handoff.js";
import { completeSignIn, createCodeHasher, startSignIn } from "../identity/signin.js";
import { createKnownBrowsers } from "../identity/known-browsers.js";
import type { Mailer } from "../identity/mail/mailer.js";
import type { OidcSignin } from "../identity/oidc.js";
import { SIGNIN_FLOW_STARTS_PER_MINUTE } from "../identity/flow-starts.js";
import { completeProviderSignIn, startProviderSignIn } from "../identity/provider-signin.js";
import type { Passkeys } from "../identity/passkeys.js";
import {
  finishPasskeyAssertion,
  finishPasskeyRegistration,
  listPasskeys,
  removePasskey,
  startPasskeyAssertion,
  startPasskeyRegistration,
} from "../identity/passkey-rpcs.js";
import { createOutbox, listOutbox } from "../identity/outbox.js";
import { createSignInStore } from "../identity/signin-store.js";
import { createUsersStore } from "../identity/users-store.js";
import type { AccessTokenVerifier } from "./access-token.js";
import { createClientDirectory } from "./client-auth.js";
import { registerClient } from "./clients.js";
import { approveAuthorization, checkAuthorization, exchangeCode } from "./authorize.js";
import { issueGrant, refreshGrant, revokeAllGrants, revokeToken, supersedeGrant, verifyAgentToken } from "./tokens.js";
import { getAgent, killSwitch, listAgents, revokeUserGrant } from "./owner.js";
import { grantAudience } from "./issue.js";
import { createGrantsStore } from "./stores/grants.js";
import { createClientsStore } from "./stores/clients.js";
import { createCodesStore } from "./stores/codes.js";
import { createAgentsStore } from "./stores/agents.js";
import type { GrantVaultsStore } from "./stores/vaults.js";
import type { InFlight } from "./stores/budget-grants.js";
import type { CursorCodec } from "../paging.js";

export { CODE_TTL_MS } from "./issue.js";

export interface GrantsServiceDeps {
  db: Db;
  keyring: Keyring;
  audit: AuditStore;
  clock: () => Date;
  secrets: SecretHasher;
  rateLimits: RateLimitStore;
  logger: Logger;
  /** `iss` of every token. */
  issuer: string;
  /** First `aud` of agent tokens, and the protected resource. */
  mcpUrl: string;
  /** Vault URN namespace: `urn:<ns>:vault:<uuid>`. */
  urnNamespace: string;
  /** How long a lost refresh response may be fetched again (about 30 s, configurable). */
  refreshGraceSeconds: number;
  /** Agent access-token verification, shared with the budgets service (one cache per process). */
  verifier: AccessTokenVerifier;
  /** Web sessions, shared with the budgets service's dashboard RPCs. */
  sessions: SessionVerifier;
  /** Failed client-secret checks per minute per agent client id (default 30). */
  clientFailuresPerMinute?: number;
  /** Dynamic client registrations per minute per client address a gateway vouched for ("" = direct callers, one bucket). */
  registrationLimitPerMinute: number;
  /** Code, passkey and provider sign-ins started without a session, per minute per client address (default SIGNIN_FLOW_STARTS_PER_MINUTE). */
  signinFlowStartsPerMinute?: number;
  /** Development only: fetch client metadata documents from private addresses, and http on loopback (docs/reference/agent-oauth.md). */
  clientMetadataAllowPrivate?: boolean;
  /** The key outside the database behind sign-in code hashes and the dev outbox (core/keys/outside-keys.ts). */
  signinCodeKey: Buffer;
  /** Resolves metadata document hosts off the thread pool (core/net/resolver.ts). */
  hostResolver?: HostResolver;
  /** Account mail: by SMTP, or the dev outbox (core/identity/mail). */
  mailer: Mailer;
  /** Sign-in at the organisation's OpenID Connect provider; absent = not offered. */
  oidc?: OidcSignin;
  /** Passkeys (WebAuthn) bound to APP_URL. */
  passkeys: Passkeys;
  /** False when SIGNIN_METHODS leaves out email. */
  emailCodesOffered?: boolean;
  /** Cancels what revoked grants left open (the budgets room's, wired by core.ts). */
  inFlight: InFlight;
  /** The vault and budget reads a grant needs (the budgets room's, wired by core.ts). */
  vaults: GrantVaultsStore;
  /** Signs the cursors of the agent page's grants (core/paging.ts). */
  cursors: CursorCodec;
}

/**
 * Assembles GrantsService from its handlers: signing keys (core/keys), clients,
 * authorization and code exchange, tokens, the owner's dashboard, and sign-in, sessions
 * and the dev outbox (core/identity). Each handler takes only the dependencies it uses.
 */
export function createGrantsService(deps: GrantsServiceDeps): ServiceImpl<typeof GrantsService> {
  const { db, clock, audit, keyring, sessions, verifier } = deps;
  const grants = createGrantsStore(db);
  const clients = createClientsStore();
  const codes = createCodesStore();
  const agents = createAgentsStore();
  const vaults = deps.vaults;
  const users = createUsersStore();
  const audience = grantAudience(deps);
  const directory = createClientDirectory({ ...deps, clients });
  const outbox = createOutbox({ mailer: deps.mailer, signinCodeKey: deps.signinCodeKey });
  const browsers = createKnownBrowsers(deps.signinCodeKey, clock);
  const flowStarts = { rateLimits: deps.rateLimits, clock, perMinute: deps.signinFlowStartsPerMinute ?? SIGNIN_FLOW_STARTS_PER_MINUTE };
  const signIn = {
    db,
    store: createSignInStore(),
    users,
    sessions,
    outbox,
    rateLimits: deps.rateLimits,
    audit,
    clock,
    logger: deps.logger,
    hashCode: createCodeHasher(deps.signinCodeKey),
    browsers,
    emailCodesOffered: deps.emailCodesOffered,
    flowStarts,
  };
  const registration = {
    db,
    clients,
    secrets: deps.secrets,
    rateLimits: deps.rateLimits,
    registrationLimitPerMinute: deps.registrationLimitPerMinute,
    audit,
    clock,
  };
  const authorization = { db, directory, vaults, sessions, audience, clients, agents, codes, audit, clock };
  const tokens = {
    db,
    directory,
    keyring,
    audience,
    verifier,
    grants,
    codes,
    clients,
    agents,
    vaults,
    users,
    audit,
    clock,
    refreshGraceSeconds: deps.refreshGraceSeconds,
    inFlight: deps.inFlight,
  };
  const owner = { db, sessions, agents, grants, audit, clock, outbox, inFlight: deps.inFlight, cursors: deps.cursors };
  const provider = { oidc: deps.oidc, sessions, clock, browsers, flowStarts };
  const passkeys = { passkeys: deps.passkeys, sessions, browsers, flowStarts };
  const signOut = { db, sessions, store: signIn.store, clock, handoffs: createSignOutHandoffs({ keyring, issuer: deps.issuer, clock }) };

  return {
    getJwks: () => getJwks({ keyring }),
    rotateSigningKey: (req, ctx) => rotateSigningKey({ keyring, audit, clock }, req, ctx),
    retireSigningKey: (req, ctx) => retireSigningKey({ keyring, audit, clock }, req, ctx),

    registerClient: (req, ctx) => registerClient(registration, req, ctx),
    checkAuthorization: (req, ctx) => checkAuthorization(authorization, req, ctx),
    approveAuthorization: (req, ctx) => approveAuthorization(authorization, req, ctx),
    exchangeCode: (req, ctx) => exchangeCode(tokens, req, ctx),

    verifyAgentToken: (req, ctx) => verifyAgentToken(tokens, req, ctx),
    supersedeGrant: (req, ctx) => supersedeGrant(tokens, req, ctx),
    revokeAllGrants: (req, ctx) => revokeAllGrants({ ...tokens, notice: { outbox, users } }, req, ctx),
    refreshGrant: (req, ctx) => refreshGrant(tokens, req, ctx),
    issueGrant: (req, ctx) => issueGrant(tokens, req, ctx),
    revokeToken: (req, ctx) => revokeToken(tokens, req, ctx),

    listAgents: (req) => listAgents(owner, req),
    getAgent: (req) => getAgent(owner, req),
    revokeUserGrant: (req, ctx) => revokeUserGrant(owner, req, ctx),
    killSwitch: (req, ctx) => killSwitch(owner, req, ctx),

    startSignIn: (req, ctx) => startSignIn(signIn, req, ctx),
    completeSignIn: (req, ctx) => completeSignIn(signIn, req, ctx),
    getSession: (req) => getSession({ sessions }, req),
    endSession: (req) => endSession(signOut, req),
    continueSignOut: (req) => continueSignOut(signOut, req),
    listOutbox: (req) => listOutbox({ db, outbox }, req),
    startProviderSignIn: (req, ctx) => startProviderSignIn(provider, req, ctx),
    completeProviderSignIn: (req, ctx) => completeProviderSignIn(provider, req, ctx),
    startPasskeyRegistration: (req) => startPasskeyRegistration(passkeys, req),
    finishPasskeyRegistration: (req, ctx) => finishPasskeyRegistration(passkeys, req, ctx),
    listPasskeys: (req) => listPasskeys(passkeys, req),
    removePasskey: (req, ctx) => removePasskey(passkeys, req, ctx),
    startPasskeyAssertion: (req, ctx) => startPasskeyAssertion(passkeys, req, ctx),
    finishPasskeyAssertion: (req, ctx) => finishPasskeyAssertion(passkeys, req, ctx),
  };
}
