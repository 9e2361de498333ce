import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import type { LedgerEntry } from "../ledger/transfers.js";
import type { KycRecord, UsAccountRecord } from "./resources-store.js";
import { CONSENT_SCOPES, TREASURY_SCOPE } from "../../lib/vocabulary.js";
import { isPartnerUrlSpelling } from "../../lib/partner-urls.js";

/** Input checks and the wire shapes (JSON events and RPC answers) of the partner resources. */
export function checkConsentScopes(scopes: string[]) {
  if (scopes.includes(TREASURY_SCOPE)) fail(Reason.INVALID_REQUEST, "treasury:write is never a consent scope: an operator grants it to the client");
  const unknown = scopes.filter((s) => !(CONSENT_SCOPES as readonly string[]).includes(s));
  if (unknown.length > 0) fail(Reason.INVALID_REQUEST, `unknown consent scopes: ${unknown.join(", ")}; allowed: ${CONSENT_SCOPES.join(", ")}`);
}

const MAX_URL_LENGTH = 2048;

/** https, or http on loopback only (like webhook and redirect URIs elsewhere), without credentials, at most `maxLength` characters. */
export function checkHttpsUrl(value: string, name: string, maxLength = MAX_URL_LENGTH): string {
  // Stored, listed and sent to on every delivery: a URL longer than browsers keep is no endpoint.
  if (value.length > maxLength) fail(Reason.INVALID_REQUEST, `${name} must be at most ${maxLength} characters`);
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return fail(Reason.INVALID_REQUEST, `${name} must be an absolute URL`);
  }
  const loopback = ["127.0.0.1", "localhost", "[::1]"].includes(url.hostname);
  if (url.protocol !== "https:" && !(url.protocol === "http:" && loopback)) fail(Reason.INVALID_REQUEST, `${name} must be https (http only on loopback)`);
  // Never sent by core, shown wherever the URL is listed, and the classic disguise of another host.
  if (url.username || url.password) fail(Reason.INVALID_REQUEST, `${name} must not carry credentials (user:password@)`);
  // Port 0 parses, yet nothing listens there: every delivery or redirect to it would fail.
  if (url.port === "0") fail(Reason.INVALID_REQUEST, `${name} must name a port from 1 to 65535`);
  // The parser forgives spellings (`https:host`, `http://127.1`) the published pattern refuses.
  if (!isPartnerUrlSpelling(value))
    fail(Reason.INVALID_REQUEST, `${name} must be written https://host/... (http://127.0.0.1, localhost or [::1] for loopback)`);
  // The limit is on what is sent: escaping ("é" is %C3%A9) can lengthen the URL.
  if (url.toString().length > maxLength) fail(Reason.INVALID_REQUEST, `${name} must be at most ${maxLength} characters once escaped`);
  // Kept as written, so the operator reads back what they set; every request parses it to the same address.
  return value;
}

export function kycJson(k: KycRecord) {
  return { user_id: k.userId, status: k.status, provider: k.provider, updated_at: k.updatedAt.toISOString() };
}

export function kycOut(k: KycRecord) {
  return { userId: k.userId, status: k.status, provider: k.provider ?? "", updatedAt: k.updatedAt.toISOString() };
}

export function usAccountOut(userId: string, a: UsAccountRecord | undefined) {
  if (!a) return { userId, status: "not_provisioned" };
  return {
    userId,
    status: "provisioned",
    bankName: a.bankName,
    routingNumber: a.routingNumber,
    accountNumber: a.accountNumber,
    accountType: a.accountType,
    beneficiaryName: a.beneficiaryName,
  };
}

export function transferJson(e: LedgerEntry) {
  return {
    transfer_id: e.id,
    direction: e.direction,
    amount_cents: e.amountCents,
    currency: e.currency,
    status: e.status,
    created_at: e.createdAt.toISOString(),
    updated_at: e.updatedAt.toISOString(),
  };
}

export function transferOut(e: LedgerEntry) {
  return {
    transferId: e.id,
    direction: e.direction,
    amountCents: BigInt(e.amountCents),
    currency: e.currency,
    status: e.status,
    createdAt: e.createdAt.toISOString(),
    updatedAt: e.updatedAt.toISOString(),
  };
}
