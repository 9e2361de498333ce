import type { RegisterClientRequest } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { AGENT_SCOPES, isSubset, parseScope } from "./scopes.js";
import { codePointLength } from "../text.js";

const GRANT_TYPES = ["authorization_code", "refresh_token"];
const AUTH_METHODS = ["client_secret_post", "client_secret_basic"];
const LOOPBACK = new Set(["127.0.0.1", "[::1]", "localhost"]);

export interface ClientMetadata {
  clientName: string;
  redirectUris: string[];
  grantTypes: string[];
  responseTypes: string[];
  tokenEndpointAuthMethod: string;
  scopes: string[];
}

/** RFC 7591 2 with spec 2.3's values; a bad redirect URI is invalid_redirect_uri, the rest invalid_client_metadata. */
export function checkClientMetadata(req: RegisterClientRequest): ClientMetadata {
  if (req.redirectUris.length === 0) fail(Reason.INVALID_REDIRECT_URI, "redirect_uris must list at least one URI");
  if (req.redirectUris.length > 10) fail(Reason.INVALID_REDIRECT_URI, "at most 10 redirect_uris");
  for (const uri of req.redirectUris) checkRedirectUri(uri);
  const grantTypes = req.grantTypes.length > 0 ? [...new Set(req.grantTypes)] : ["authorization_code", "refresh_token"];
  if (!isSubset(grantTypes, GRANT_TYPES) || !grantTypes.includes("authorization_code")) {
    fail(Reason.INVALID_CLIENT_METADATA, "grant_types must be authorization_code, optionally with refresh_token");
  }
  const responseTypes = req.responseTypes.length > 0 ? [...new Set(req.responseTypes)] : ["code"];
  if (responseTypes.length !== 1 || responseTypes[0] !== "code") fail(Reason.INVALID_CLIENT_METADATA, "response_types must be [\"code\"]");
  const method = req.tokenEndpointAuthMethod || "client_secret_basic";
  if (!AUTH_METHODS.includes(method)) fail(Reason.INVALID_CLIENT_METADATA, `token_endpoint_auth_method must be one of ${AUTH_METHODS.join(", ")}`);
  const scopes = parseScope(req.scope);
  if (!scopes) fail(Reason.INVALID_CLIENT_METADATA, "scope must be space-separated scope names");
  if (!isSubset(scopes, AGENT_SCOPES)) fail(Reason.INVALID_CLIENT_METADATA, `scope may hold ${AGENT_SCOPES.join(", ")}`);
  const clientName = req.clientName.trim();
  if (codePointLength(clientName) > 100) fail(Reason.INVALID_CLIENT_METADATA, "client_name is at most 100 characters");
  if (/[\u0000-\u001f\u007f]/.test(clientName)) fail(Reason.INVALID_CLIENT_METADATA, "client_name has control characters");
  return {
    clientName: clientName || "Unnamed agent",
    redirectUris: [...new Set(req.redirectUris)],
    grantTypes,
    responseTypes,
    tokenEndpointAuthMethod: method,
    scopes: scopes.length > 0 ? scopes : [...AGENT_SCOPES],
  };
}

/** DESIGN 4.2: https, or http on loopback only; absolute, no fragment, no credentials. */
function checkRedirectUri(uri: string): void {
  let url: URL;
  try {
    url = new URL(uri);
  } catch {
    return fail(Reason.INVALID_REDIRECT_URI, "redirect_uris must be absolute URIs");
  }
  if (uri.length > 2000) fail(Reason.INVALID_REDIRECT_URI, "redirect URI too long");
  if (url.hash || uri.includes("#")) fail(Reason.INVALID_REDIRECT_URI, "redirect URIs must not have a fragment");
  if (url.username || url.password) fail(Reason.INVALID_REDIRECT_URI, "redirect URIs must not carry credentials");
  if (url.protocol === "https:") return;
  if (url.protocol === "http:" && LOOPBACK.has(url.hostname)) return;
  fail(Reason.INVALID_REDIRECT_URI, "redirect URIs must be https (http only on loopback)");
}
