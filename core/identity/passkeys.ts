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
import type { Mailer } from "./mail/mailer.js";
import type { CallFacts } from "./oidc.js";

/** A signed-in person as core verified them from the session token. */
export interface PasskeySession {
  sessionId: string;
  userId: string;
  email: string;
  /** Adding a passkey needs a recent step-up. */
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

/** True when a passkey made for `rpId` can be used on `host`: the same host, or one under it. */
export function rpIdCovers(rpId: string, host: string): boolean {
  return host === rpId || host.endsWith(`.${rpId}`);
}

/** The relying party of an APP_URL: its origin, and its host as RP ID. */
export function relyingParty(appUrl: string): { origin: string; rpId: string } {
  const url = new URL(appUrl);
  return { origin: url.origin, rpId: url.hostname };
}

/**
 * Passkeys for sign-in and step-up, user verification always required; challenges are single-use
 * flows bound to a browser cookie. A signature counter that does not advance means a clone: refused and audited.
 */
export function createPasskeys(deps: PasskeyDeps) {
  const { db } = deps;
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
    await db("signin_flows").insert({
      id: randomUUID(),
      binding_hash: sha256Hex(binding),
      method: "passkey",
      purpose,
      session_id: session?.sessionId ?? null,
      user_id: session?.userId ?? null,
      challenge,
      created_at: now,
      expires_at: new Date(now.getTime() + ttl),
    });
    return binding;
  }

  /** Takes a flow once: its challenge can answer one response, right or wrong. */
  async function takeFlow(binding: string, purpose: "register" | PasskeyPurpose) {
    const now = deps.clock();
    if (!binding || binding.length > 100) return undefined;
    const res = await db.raw(
      `UPDATE signin_flows SET consumed_at = ? WHERE binding_hash = ? AND method = 'passkey' AND purpose = ? AND consumed_at IS NULL AND expires_at > ?
        RETURNING session_id, user_id, challenge`,
      [now, sha256Hex(binding), purpose, now],
    );
    return (res.rows ?? [])[0] as { session_id: string | null; user_id: string | null; challenge: string } | undefined;
  }

  // The methods are core's decision: a caller skipping the pages must not get in by a passkey either.
  function refuseIfNotOffered() {
    if (deps.offered === false) fail(Reason.NOT_FOUND, "signing in or confirming with a passkey is not offered here");
  }

  async function activeKeys(userId: string) {
    return db("passkeys").where({ user_id: userId, rp_id: rpId }).whereNull("removed_at").orderBy("created_at");
  }

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
        excludeCredentials: existing.map((k) => ({ id: String(k.credential_id), transports: k.transports as WebAuthnCredential["transports"] })),
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
      const name = input.name.trim().slice(0, 60) || "Passkey";
      const flow = await takeFlow(input.binding, "register");
      const refuse = async (why: string): Promise<never> => {
        await audit(db, facts, { actor, action: "passkey.register", outcome: "failure", reason: why });
        fail(Reason.ACCESS_DENIED, "this passkey could not be added; start again from the dashboard");
      };
      if (!flow || flow.session_id !== session.sessionId) return refuse("no unused registration challenge for this session");
      if (!session.stepUpFresh) return refuse("step-up no longer fresh");
      let verified: Awaited<ReturnType<typeof verifyRegistrationResponse>>;
      try {
        verified = await verifyRegistrationResponse({
          response: input.response,
          expectedChallenge: flow.challenge,
          expectedOrigin: origins,
          expectedRPID: rpId,
          requireUserVerification: true,
        });
      } catch (err) {
        return refuse(`registration response invalid: ${(err as Error).message.slice(0, 120)}`);
      }
      if (!verified.verified) return refuse("registration response not verified");
      const info = verified.registrationInfo;
      const now = deps.clock();
      const id = randomUUID();
      await db.transaction(async (trx) => {
        const inserted = await trx.raw(
          `INSERT INTO passkeys (id, credential_id, user_id, rp_id, public_key, counter, transports, device_type, backed_up, aaguid, name, created_at)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (credential_id) DO NOTHING RETURNING id`,
          [
            id,
            info.credential.id,
            session.userId,
            rpId,
            Buffer.from(info.credential.publicKey),
            info.credential.counter,
            info.credential.transports ?? [],
            info.credentialDeviceType,
            info.credentialBackedUp,
            info.aaguid,
            name,
            now,
          ],
        );
        if ((inserted.rows ?? []).length === 0) fail(Reason.ACCESS_DENIED, "this passkey is already registered");
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
      const keys = session ? await activeKeys(session.userId) : [];
      if (session && keys.length === 0) fail(Reason.ACCESS_DENIED, "you have no passkey yet; confirm another way, then add one on the dashboard");
      const options = await generateAuthenticationOptions({
        rpID: rpId,
        userVerification: "required",
        allowCredentials: keys.map((k) => ({ id: String(k.credential_id), transports: k.transports as WebAuthnCredential["transports"] })),
      });
      return { options, binding: await newFlow(purpose, options.challenge, session) };
    },

    /**
     * Verifies an assertion (user verification required). Sign-in makes a web session; a
     * step-up marks the session it was started in, and only with that person's passkey.
     */
    async authenticate(
      input: { binding: string; response: AuthenticationResponseJSON; session?: { sessionId: string; userId: string } },
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
      if (input.session && flow.session_id !== input.session.sessionId) return refuse("step-up challenge of another session", `user:${input.session.userId}`);
      const credentialId = typeof input.response?.id === "string" ? input.response.id : "";
      const key = credentialId ? await db("passkeys").where({ credential_id: credentialId, rp_id: rpId }).whereNull("removed_at").first() : undefined;
      if (!key) return refuse("unknown passkey", input.session ? `user:${input.session.userId}` : "anonymous");
      const actor = `user:${key.user_id}`;
      if (input.session && String(key.user_id) !== input.session.userId) return refuse("another person's passkey", `user:${input.session.userId}`);
      let info: Awaited<ReturnType<typeof verifyAuthenticationResponse>>["authenticationInfo"];
      try {
        // The counter is compared below, after the signature is known good, so a clone is told apart.
        const verified = await verifyAuthenticationResponse({
          response: input.response,
          expectedChallenge: flow.challenge,
          expectedOrigin: origins,
          expectedRPID: rpId,
          credential: {
            id: String(key.credential_id),
            publicKey: new Uint8Array(key.public_key as Buffer),
            counter: 0,
            transports: key.transports as WebAuthnCredential["transports"],
          },
          requireUserVerification: true,
        });
        if (!verified.verified) return refuse("assertion not verified", actor);
        info = verified.authenticationInfo;
      } catch (err) {
        return refuse(`assertion invalid: ${(err as Error).message.slice(0, 120)}`, actor);
      }
      const stored = Number(key.counter);
      const now = deps.clock();
      // The counter must move forward (both 0: an authenticator without a counter). The
      // update is conditional, so two uses of one counter value cannot both pass.
      const moved = await db.raw(
        `UPDATE passkeys SET counter = ?, backed_up = ?, device_type = ?, last_used_at = ? WHERE id = ? AND removed_at IS NULL AND (counter < ? OR (counter = 0 AND ? = 0)) RETURNING id`,
        [info.newCounter, info.credentialBackedUp, info.credentialDeviceType, now, key.id, info.newCounter, info.newCounter],
      );
      if ((moved.rows ?? []).length === 0) {
        deps.logger.warn({ passkey: key.id, stored, presented: info.newCounter }, "passkey counter went back: possible cloned authenticator");
        await audit(db, facts, {
          actor,
          action: "passkey.clone_suspected",
          subject: String(key.id),
          outcome: "failure",
          reason: `counter ${info.newCounter} not above ${stored}`,
        });
        return refuse("signature counter did not move forward (cloned authenticator?)", actor);
      }
      const user = await db("users").where({ id: key.user_id }).first("status");
      if (!user || user.status !== "active") return refuse("account not active", actor);
      if (purpose === "step_up") {
        await db.transaction(async (trx) => {
          await trx("web_sessions").where({ id: flow.session_id }).update({ step_up_at: now });
          await audit(trx, facts, { actor, action: "web.step_up", subject: "passkey", outcome: "success" });
        });
        return { purpose, userId: String(key.user_id) };
      }
      const token = `vgs_${randomBytes(32).toString("base64url")}`;
      await db.transaction(async (trx) => {
        await trx("web_sessions").insert({
          id: randomUUID(),
          token_hash: sha256Hex(token),
          user_id: key.user_id,
          created_at: now,
          expires_at: new Date(now.getTime() + deps.sessionTtlMs),
        });
        await audit(trx, facts, { actor, action: "web.sign_in", subject: "passkey", outcome: "success" });
      });
      return { purpose, userId: String(key.user_id), sessionToken: token, expiresIn: Math.floor(deps.sessionTtlMs / 1000) };
    },

    async list(userId: string): Promise<PasskeyRecord[]> {
      return (await activeKeys(userId)).map((k) => ({
        id: String(k.id),
        name: String(k.name),
        createdAt: new Date(k.created_at),
        lastUsedAt: k.last_used_at ? new Date(k.last_used_at) : null,
        backedUp: Boolean(k.backed_up),
        deviceType: k.device_type,
      }));
    },

    /** Removes one of the person's own passkeys (another's answers NOT_FOUND, like a missing one). */
    async remove(userId: string, passkeyId: string, facts: CallFacts): Promise<void> {
      if (!/^[0-9a-f-]{36}$/i.test(passkeyId)) fail(Reason.NOT_FOUND, "no such passkey");
      await db.transaction(async (trx) => {
        const n = await trx("passkeys").where({ id: passkeyId.toLowerCase(), user_id: userId }).whereNull("removed_at").update({ removed_at: deps.clock() });
        if (n === 0) fail(Reason.NOT_FOUND, "no such passkey");
        await audit(trx, facts, { actor: `user:${userId}`, action: "passkey.remove", subject: passkeyId.toLowerCase(), outcome: "success" });
      });
    },
  };
}

export type Passkeys = ReturnType<typeof createPasskeys>;
