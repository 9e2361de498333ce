import { randomBytes, randomUUID } from "node:crypto";
import {
  generateAuthenticationOptions,
  generateRegistrationOptions,
  verifyAuthenticationResponse,
  verifyRegistrationResponse,
  type AuthenticationResponseJSON,
  type WebAuthnCredential,
  type PublicKeyCredentialCreationOptionsJSON,
  type PublicKeyCredentialRequestOptionsJSON,
  type RegistrationResponseJSON,
} from "@simplewebauthn/server";
import type { Knex } from "knex";
import type { Logger } from "pino";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { AuditStore } from "../audit/store.js";
import type { Db } from "../db/knex.js";
import { fail } from "../errors.js";
import { sha256Hex } from "../../lib/crypto.js";
import { quotedExcerpt, withoutForbiddenNameCharacters } from "../../lib/text.js";
import { UUID } from "../../lib/uuid.js";
import { createFlowsStore } from "./flows-store.js";
import type { Mailer } from "./mail/mailer.js";
import type { CallFacts } from "./oidc.js";
import { createPasskeysStore, type StoredPasskey } from "./passkeys-store.js";
import { openSession } from "./sessions.js";
import { createSignInStore } from "./signin-store.js";
import { createUsersStore } from "./users-store.js";
import { relyingParty, rpIdCovers } from "./relying-party.js";

/** A signed-in person as core verified them from the session token. */
export interface PasskeySession {
  sessionId: string;
  userId: string;
  email: string;
  /** Adding or removing a passkey needs a recent step-up. */
  stepUpFresh: boolean;
}

export interface PasskeyRecord {
  id: string;
  name: string;
  createdAt: Date;
  lastUsedAt: Date | null;
  backedUp: boolean;
  deviceType: "singleDevice" | "multiDevice";
}

export interface PasskeyDeps {
  db: Db;
  audit: AuditStore;
  clock: () => Date;
  logger: Logger;
  /** The dashboard's public address: the origin passkeys are bound to, and its host the RP ID. */
  appUrl: string;
  /** AUTH_URL, where the consent page steps up: its origin is accepted too when the RP ID covers its host. */
  authUrl?: string;
  rpName?: string;
  sessionTtlMs: number;
  /** Tells the account holder when a passkey is added (optional: tests of the ceremony alone). */
  mailer?: Mailer;
  /** How long a person has to answer a challenge. */
  challengeTtlMs?: number;
  /** False when SIGNIN_METHODS leaves out passkey: no ceremony starts or completes (default true). */
  offered?: boolean;
}

export type PasskeyPurpose = "sign_in" | "step_up";

/**
 * Passkeys for sign-in and step-up, user verification always required; challenges are single-use
 * flows bound to a browser cookie. A signature counter that does not advance means a clone: refused and audited.
 */
export function createPasskeys(deps: PasskeyDeps) {
  const { db } = deps;
  const flows = createFlowsStore();
  const keys = createPasskeysStore();
  const users = createUsersStore();
  const sessionsStore = createSignInStore();
  const { origin, rpId } = relyingParty(deps.appUrl);
  const auth = deps.authUrl ? new URL(deps.authUrl) : undefined;
  // Where a ceremony may happen: the dashboard, and the consent page when the browser would allow it there.
  const origins = auth && auth.origin !== origin && rpIdCovers(rpId, auth.hostname) ? [origin, auth.origin] : [origin];
  const ttl = deps.challengeTtlMs ?? 5 * 60_000;

  const audit = (
    conn: Knex | Knex.Transaction,
    facts: CallFacts,
    e: { actor: string; action: string; subject?: string; outcome: "success" | "failure"; reason?: string },
  ) => deps.audit.append(conn, { requestId: facts.requestId, clientAddress: facts.clientAddress, at: deps.clock(), ...e });

  async function newFlow(purpose: "register" | PasskeyPurpose, challenge: string, session?: { sessionId: string; userId: string }) {
    const now = deps.clock();
    const binding = randomBytes(32).toString("base64url");
    await flows.insert(db, {
      id: randomUUID(),
      bindingHash: sha256Hex(binding),
      method: "passkey",
      purpose,
      sessionId: session?.sessionId,
      userId: session?.userId,
      challenge,
      at: now,
      expiresAt: new Date(now.getTime() + ttl),
    });
    return binding;
  }

  /** Takes a flow once: its challenge can answer one response, right or wrong. */
  async function takeFlow(binding: string, purpose: "register" | PasskeyPurpose) {
    const now = deps.clock();
    if (!binding || binding.length > 100) return undefined;
    return flows.take(db, { bindingHash: sha256Hex(binding), method: "passkey", purpose, at: now });
  }

  // The methods are core's decision: a caller skipping the pages must not get in by a passkey either.
  function refuseIfNotOffered() {
    if (deps.offered === false) fail(Reason.NOT_FOUND, "signing in or confirming with a passkey is not offered here");
  }

  const activeKeys = (userId: string) => keys.listActive(db, userId, rpId);
  const descriptor = (k: StoredPasskey) => ({ id: k.credentialId, transports: k.transports as WebAuthnCredential["transports"] });

  return {
    rpId,
    origin,

    /** Options for navigator.credentials.create, for a signed-in owner after a fresh step-up. */
    async registrationOptions(session: PasskeySession): Promise<{ options: PublicKeyCredentialCreationOptionsJSON; binding: string }> {
      refuseIfNotOffered();
      if (!session.stepUpFresh) fail(Reason.ACCESS_DENIED, "confirm it is you first: adding a passkey needs a fresh confirmation");
      const existing = await activeKeys(session.userId);
      const options = await generateRegistrationOptions({
        rpName: deps.rpName ?? "Vaultgate",
        rpID: rpId,
        userName: session.email,
        userID: Buffer.from(session.userId.replace(/-/g, ""), "hex"),
        attestationType: "none",
        excludeCredentials: existing.map(descriptor),
        authenticatorSelection: { residentKey: "preferred", userVerification: "required" },
      });
      return { options, binding: await newFlow("register", options.challenge, session) };
    },

    /** Verifies the authenticator's answer and stores the passkey; the account holder is told by mail. */
    async register(
      input: { binding: string; response: RegistrationResponseJSON; name: string; session: PasskeySession },
      facts: CallFacts,
    ): Promise<PasskeyRecord> {
      refuseIfNotOffered();
      const { session } = input;
      const actor = `user:${session.userId}`;
      // The person's own label, shown on pages and mailed: none of the characters names may not hold (refusing
      // would waste the ceremony just done), 60 code points (an emoji stays whole).
      const name = Array.from(withoutForbiddenNameCharacters(input.name).trim()).slice(0, 60).join("") || "Passkey";
      const flow = await takeFlow(input.binding, "register");
      const refuse = async (why: string): Promise<never> => {
        await audit(db, facts, { actor, action: "passkey.register", outcome: "failure", reason: why });
        fail(Reason.ACCESS_DENIED, "this passkey could not be added; start again from the dashboard");
      };
      if (!flow || flow.sessionId !== session.sessionId) return refuse("no unused registration challenge for this session");
      if (!session.stepUpFresh) return refuse("step-up no longer fresh");
      let verified: Awaited<ReturnType<typeof verifyRegistrationResponse>>;
      try {
        verified = await verifyRegistrationResponse({
          response: input.response,
          expectedChallenge: flow.challenge ?? "",
          expectedOrigin: origins,
          expectedRPID: rpId,
          requireUserVerification: true,
        });
      } catch (err) {
        return refuse(`registration response invalid: ${quotedExcerpt((err as Error).message, 120)}`);
      }
      if (!verified.verified) return refuse("registration response not verified");
      const info = verified.registrationInfo;
      // The browser's transports are hints outside the signed data: only its strings are kept.
      const given: unknown = info.credential.transports;
      const transports = Array.isArray(given) ? given.filter((t): t is string => typeof t === "string") : [];
      const now = deps.clock();
      const id = randomUUID();
      await db.transaction(async (trx) => {
        const inserted = await keys.insert(trx, {
          id,
          credentialId: info.credential.id,
          userId: session.userId,
          rpId,
          publicKey: info.credential.publicKey,
          counter: info.credential.counter,
          transports,
          deviceType: info.credentialDeviceType,
          backedUp: info.credentialBackedUp,
          aaguid: info.aaguid,
          name,
          createdAt: now,
        });
        if (!inserted) fail(Reason.ACCESS_DENIED, "this passkey is already registered");
        await audit(trx, facts, { actor, action: "passkey.register", subject: id, outcome: "success" });
        await deps.mailer?.queue(trx, {
          to: session.email,
          subject: "Vaultgate: a passkey was added to your account",
          body: `A passkey named "${name}" was added to your Vaultgate account. If it was not you, sign in, remove it from the dashboard and use the kill switch.`,
          at: now,
        });
      });
      return { id, name, createdAt: now, lastUsedAt: null, backedUp: info.credentialBackedUp, deviceType: info.credentialDeviceType };
    },

    /** Options for navigator.credentials.get: for a step-up the session user's passkeys, for sign-in any discoverable one. */
    async authenticationOptions(
      purpose: PasskeyPurpose,
      session?: { sessionId: string; userId: string },
    ): Promise<{ options: PublicKeyCredentialRequestOptionsJSON; binding: string }> {
      refuseIfNotOffered();
      if ((purpose === "step_up") !== Boolean(session)) fail(Reason.INVALID_REQUEST, "a step-up needs a signed-in session, and only a step-up has one");
      const own = session ? await activeKeys(session.userId) : [];
      if (session && own.length === 0) fail(Reason.ACCESS_DENIED, "you have no passkey yet; confirm another way, then add one on the dashboard");
      const options = await generateAuthenticationOptions({
        rpID: rpId,
        userVerification: "required",
        allowCredentials: own.map(descriptor),
      });
      return { options, binding: await newFlow(purpose, options.challenge, session) };
    },

    /**
     * Verifies an assertion (user verification required). Sign-in makes a web session; a
     * step-up marks the session it was started in, and only with that person's passkey.
     */
    async authenticate(
      input: { binding: string; response: AuthenticationResponseJSON; session?: { sessionId: string; userId: string }; replaces?: string },
      facts: CallFacts,
    ): Promise<{ purpose: "sign_in"; userId: string; sessionToken: string; expiresIn: number } | { purpose: "step_up"; userId: string }> {
      refuseIfNotOffered();
      const purpose: PasskeyPurpose = input.session ? "step_up" : "sign_in";
      const action = purpose === "step_up" ? "web.passkey.step_up" : "web.passkey.sign_in";
      const refuse = async (why: string, actor = "anonymous"): Promise<never> => {
        await audit(db, facts, { actor, action, outcome: "failure", reason: why });
        fail(
          Reason.ACCESS_DENIED,
          purpose === "step_up" ? "your passkey did not confirm it is you; try again" : "signing in with a passkey did not work; try again",
        );
      };
      const flow = await takeFlow(input.binding, purpose);
      if (!flow)
        return refuse(
          "no unused challenge for this browser (replayed, expired or started elsewhere)",
          input.session ? `user:${input.session.userId}` : "anonymous",
        );
      if (input.session && flow.sessionId !== input.session.sessionId) return refuse("step-up challenge of another session", `user:${input.session.userId}`);
      const credentialId = typeof input.response?.id === "string" ? input.response.id : "";
      const key = credentialId ? await keys.findActive(db, credentialId, rpId) : undefined;
      if (!key) return refuse("unknown passkey", input.session ? `user:${input.session.userId}` : "anonymous");
      const actor = `user:${key.userId}`;
      if (input.session && key.userId !== input.session.userId) return refuse("another person's passkey", `user:${input.session.userId}`);
      let info: Awaited<ReturnType<typeof verifyAuthenticationResponse>>["authenticationInfo"];
      try {
        // The counter is compared below, after the signature is known good, so a clone is told apart.
        const verified = await verifyAuthenticationResponse({
          response: input.response,
          expectedChallenge: flow.challenge ?? "",
          expectedOrigin: origins,
          expectedRPID: rpId,
          credential: {
            id: key.credentialId,
            publicKey: key.publicKey,
            counter: 0,
            transports: key.transports as WebAuthnCredential["transports"],
          },
          requireUserVerification: true,
        });
        if (!verified.verified) return refuse("assertion not verified", actor);
        info = verified.authenticationInfo;
      } catch (err) {
        return refuse(`assertion invalid: ${quotedExcerpt((err as Error).message, 120)}`, actor);
      }
      const stored = key.counter;
      const now = deps.clock();
      const moved = await keys.recordUse(db, key.id, {
        counter: info.newCounter,
        backedUp: info.credentialBackedUp,
        deviceType: info.credentialDeviceType,
        at: now,
      });
      // A removal that committed since the passkey was read is no clone: the passkey is simply gone.
      if (!moved && !(await keys.findActive(db, key.credentialId, rpId))) return refuse("passkey removed during the sign-in", actor);
      if (!moved) {
        deps.logger.warn({ passkey: key.id, stored, presented: info.newCounter }, "passkey counter went back: possible cloned authenticator");
        await audit(db, facts, {
          actor,
          action: "passkey.clone_suspected",
          subject: key.id,
          outcome: "failure",
          reason: `counter ${info.newCounter} not above ${stored}`,
        });
        return refuse("signature counter did not move forward (cloned authenticator?)", actor);
      }
      const user = await users.findById(db, key.userId);
      if (user?.status !== "active") return refuse("account not active", actor);
      if (purpose === "step_up") {
        await db.transaction(async (trx) => {
          await sessionsStore.setStepUp(trx, flow.sessionId!, now);
          await audit(trx, facts, { actor, action: "web.step_up", subject: "passkey", outcome: "success" });
        });
        return { purpose, userId: key.userId };
      }
      const token = await db.transaction(async (trx) => {
        // Read again, held: a deactivation that committed since the read above has ended the user's sessions.
        if ((await users.holdUserStatus(trx, key.userId)) !== "active") return undefined;
        await audit(trx, facts, { actor, action: "web.sign_in", subject: "passkey", outcome: "success" });
        return openSession(sessionsStore, trx, key.userId, now, deps.sessionTtlMs, input.replaces);
      });
      if (token === undefined) return refuse("account not active", actor);
      return { purpose, userId: key.userId, sessionToken: token, expiresIn: Math.floor(deps.sessionTtlMs / 1000) };
    },

    async list(userId: string): Promise<PasskeyRecord[]> {
      return (await activeKeys(userId)).map((k) => ({
        id: k.id,
        name: k.name,
        createdAt: k.createdAt,
        lastUsedAt: k.lastUsedAt,
        backedUp: k.backedUp,
        deviceType: k.deviceType,
      }));
    },

    /** Removes one of the person's own passkeys (another's answers NOT_FOUND, like a missing one); the holder is told by mail. */
    async remove(session: PasskeySession, passkeyId: string, facts: CallFacts): Promise<void> {
      // Taking a way in away is as sensitive as adding one: a stolen session must not strip passkeys unseen.
      if (!session.stepUpFresh) fail(Reason.ACCESS_DENIED, "confirm it is you first: removing a passkey needs a fresh confirmation");
      if (!UUID.test(passkeyId)) fail(Reason.NOT_FOUND, "no such passkey");
      const now = deps.clock();
      await db.transaction(async (trx) => {
        const name = (await keys.remove(trx, session.userId, passkeyId.toLowerCase(), now)) ?? fail(Reason.NOT_FOUND, "no such passkey");
        await audit(trx, facts, { actor: `user:${session.userId}`, action: "passkey.remove", subject: passkeyId.toLowerCase(), outcome: "success" });
        await deps.mailer?.queue(trx, {
          to: session.email,
          subject: "Vaultgate: a passkey was removed from your account",
          body: `The passkey named "${name}" was removed from your Vaultgate account. If it was not you, sign in, use the kill switch and add your passkey again.`,
          at: now,
        });
      });
    },
  };
}

export type Passkeys = ReturnType<typeof createPasskeys>;
