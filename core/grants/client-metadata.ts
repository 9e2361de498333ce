import type { RegisterClientRequest } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { parseScope } from "../../lib/scopes.js";
import { AGENT_SCOPES } from "../../lib/vocabulary.js";
import { isSubset } from "./scopes.js";
import { codePointLength, nameProblem } from "../../lib/text.js";

const GRANT_TYPES = ["authorization_code", "refresh_token"];
const AUTH_METHODS = ["client_secret_post", "client_secret_basic", "none"];
const LOOPBACK = new Set(["127.0.0.1", "[::1]", "localhost"]);
/** RFC 3986 2: the characters of a URI; the URL parser drops or rewrites others (tab, space, backslash). */
const URI_CHARACTERS = /^[A-Za-z0-9\-._~:/?#[\]@!$&'()*+,;=%]+$/;

export interface ClientMetadata {
  clientName: string;
  redirectUris: string[];
  grantTypes: string[];
  responseTypes: string[];
  tokenEndpointAuthMethod: string;
  scopes: string[];
}

/** What differs between a registration (RFC 7591) and a client ID metadata document. */
export interface MetadataRules {
  authMethods: string[];
  defaultAuthMethod: string;
  /** Scope names we do not know: refused (registration) or ignored (a document is written for many servers). */
  unknownScopes: "refuse" | "ignore";
  /** Every failure carries this reason instead of invalid_redirect_uri / invalid_client_metadata. */
  reason?: Reason;
}

const REGISTRATION: MetadataRules = { authMethods: AUTH_METHODS, defaultAuthMethod: "client_secret_basic", unknownScopes: "refuse" };

type MetadataFields = Pick<RegisterClientRequest, "clientName" | "redirectUris" | "grantTypes" | "responseTypes" | "tokenEndpointAuthMethod" | "scope">;

/** RFC 7591 2 with our allowed values; a bad redirect URI is invalid_redirect_uri, the rest invalid_client_metadata. */
export function checkClientMetadata(req: MetadataFields, rules: MetadataRules = REGISTRATION): ClientMetadata {
  const bad = (reason: Reason, message: string): never => fail(rules.reason ?? reason, message);
  if (req.redirectUris.length === 0) bad(Reason.INVALID_REDIRECT_URI, "redirect_uris must list at least one URI");
  if (req.redirectUris.length > 10) bad(Reason.INVALID_REDIRECT_URI, "at most 10 redirect_uris");
  for (const uri of req.redirectUris) checkRedirectUri(uri, rules.reason);
  const grantTypes = req.grantTypes.length > 0 ? [...new Set(req.grantTypes)] : ["authorization_code", "refresh_token"];
  if (!isSubset(grantTypes, GRANT_TYPES) || !grantTypes.includes("authorization_code")) {
    bad(Reason.INVALID_CLIENT_METADATA, "grant_types must be authorization_code, optionally with refresh_token");
  }
  const responseTypes = req.responseTypes.length > 0 ? [...new Set(req.responseTypes)] : ["code"];
  if (responseTypes.length !== 1 || responseTypes[0] !== "code") bad(Reason.INVALID_CLIENT_METADATA, 'response_types must be ["code"]');
  const method = req.tokenEndpointAuthMethod || rules.defaultAuthMethod;
  if (!rules.authMethods.includes(method)) bad(Reason.INVALID_CLIENT_METADATA, `token_endpoint_auth_method must be one of ${rules.authMethods.join(", ")}`);
  // "" is how an omitted scope arrives (the default below); one that is there but blank names nothing.
  if (req.scope !== "" && req.scope.trim() === "") bad(Reason.INVALID_CLIENT_METADATA, "scope names no scope: leave it out for the default, or name scopes");
  let scopes = parseScope(req.scope);
  if (!scopes) return bad(Reason.INVALID_CLIENT_METADATA, "scope must be space-separated scope names");
  if (rules.unknownScopes === "ignore") {
    const asked = scopes.length;
    scopes = scopes.filter((s) => (AGENT_SCOPES as readonly string[]).includes(s));
    if (asked > 0 && scopes.length === 0) bad(Reason.INVALID_CLIENT_METADATA, `scope names none of ${AGENT_SCOPES.join(", ")}`);
  }
  if (!isSubset(scopes, AGENT_SCOPES)) bad(Reason.INVALID_CLIENT_METADATA, `scope may hold ${AGENT_SCOPES.join(", ")}`);
  const clientName = req.clientName.trim();
  if (codePointLength(clientName) > 100) bad(Reason.INVALID_CLIENT_METADATA, "client_name is at most 100 characters");
  const nameWrong = nameProblem(req.clientName);
  if (nameWrong) bad(Reason.INVALID_CLIENT_METADATA, `client_name ${nameWrong}`);
  return {
    clientName: clientName || "Unnamed agent",
    redirectUris: [...new Set(req.redirectUris)],
    grantTypes,
    responseTypes,
    tokenEndpointAuthMethod: method,
    scopes: scopes.length > 0 ? scopes : [...AGENT_SCOPES],
  };
}

/** Redirect URIs: https, or http on loopback only; absolute, no fragment, no credentials. */
function checkRedirectUri(uri: string, reason = Reason.INVALID_REDIRECT_URI): void {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    fail(reason, "redirect_uris must be absolute URIs");
  }
  if (uri.length > 2000) fail(reason, "redirect URI too long");
  if (!URI_CHARACTERS.test(uri)) fail(reason, "redirect URIs must be RFC 3986 URIs: no space, control character or backslash");
  if (url.hash || uri.includes("#")) fail(reason, "redirect URIs must not have a fragment");
  if (url.username || url.password) fail(reason, "redirect URIs must not carry credentials");
  if (url.protocol === "https:") return;
  if (url.protocol === "http:" && LOOPBACK.has(url.hostname)) return;
  fail(reason, "redirect URIs must be https (http only on loopback)");
}

/**
 * Whether a presented redirect URI is one of the client's: exact match, except that an http
 * loopback URI may name any port (RFC 8252 7.3, RFC 9700 2.1), as native apps listen on one the OS picks.
 */
export function isRegisteredRedirectUri(registered: readonly string[], presented: string): boolean {
  if (registered.includes(presented)) return true;
  const asked = loopbackWithoutPort(presented);
  return asked !== undefined && registered.some((uri) => loopbackWithoutPort(uri) === asked);
}

/** An http loopback URI in the parser's own spelling with its port removed; undefined for any other. */
function loopbackWithoutPort(uri: string): string | undefined {
  if (!URL.canParse(uri)) return undefined;
  const url = new URL(uri);
  // Only a URI the parser prints back unchanged: no second spelling of a registered one matches.
  if (url.href !== uri || url.protocol !== "http:" || !LOOPBACK.has(url.hostname)) return undefined;
  url.port = "";
  return url.href;
}
