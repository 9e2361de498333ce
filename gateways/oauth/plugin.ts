import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Client } from "@connectrpc/connect";
import type { GrantsService, TokenResponse } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { forRequest, withRequestId } from "../core-clients.js";
import { parseForm } from "../shared/form.js";
import { refuseEncodedBodies } from "../shared/content-encoding.js";
import { findBadText } from "../shared/text.js";
import { parseBasicCredentials } from "../shared/basic-auth.js";
import { agentTokenJson } from "../shared/token-response.js";
import { isOutage, oauthErrorFrom, sendOAuthError, type OAuthError } from "../shared/oauth-error.js";
import { AGENT_SCOPE_WORDS, type PublicUrls } from "../shared/public-urls.js";
import { MCP_CATEGORY_SCOPES, MCP_ENDPOINTS } from "../../lib/vocabulary.js";
import { noteRefusal } from "../request-log.js";
import { jsonTooDeep, TOO_DEEP } from "../shared/json-depth.js";
import { repeatedMember, repeatedMemberMessage } from "../shared/json-members.js";
import { NOT_UTF8, NOT_UTF8_MESSAGE, utf8Parser } from "../shared/utf8.js";

export interface OAuthGatewayOptions {
  grants: Client<typeof GrantsService>;
  urls: PublicUrls;
  /** `WWW-Authenticate: Basic realm` on 401 invalid_client. */
  realm: string;
}

const FORM_TYPE = "application/x-www-form-urlencoded";
const FORM_LIMIT = 8192;
const JSON_LIMIT = 16 * 1024;
/** RFC 8707: `resource` may repeat; every other parameter must not (RFC 6749 3.1/3.2). */
const REPEATABLE = ["resource"];

class OAuthRequestError extends Error {
  constructor(readonly oauth: OAuthError) {
    super(oauth.error);
  }
}
const invalidRequest = (description: string) => new OAuthRequestError({ status: 400, error: "invalid_request", description });
const invalidClient = () => new OAuthRequestError({ status: 401, error: "invalid_client", description: "client authentication failed" });

/**
 * Agent OAuth JSON endpoints on {auth_url}: registration,
 * token, revocation, and the RFC 8414 / RFC 9728 metadata documents.
 */
export async function oauthGateway(app: FastifyInstance, options: OAuthGatewayOptions) {
  const { grants, urls } = options;
  // A compressed body is refused as a wrong content type is, with the 415 that names it.
  app.addHook(
    "onRequest",
    refuseEncodedBodies((description, request) => {
      const error = request.url.startsWith("/oauth2/register") ? "invalid_client_metadata" : "invalid_request";
      return new OAuthRequestError({ status: 415, error, description });
    }),
  );
  app.addContentTypeParser(FORM_TYPE, { parseAs: "buffer", bodyLimit: FORM_LIMIT }, utf8Parser);
  // Registration parses JSON itself, so malformed bodies get RFC 7591's error, not fastify's.
  app.removeContentTypeParser("application/json");
  app.addContentTypeParser("application/json", { parseAs: "buffer", bodyLimit: JSON_LIMIT }, utf8Parser);
  app.addContentTypeParser("*", { parseAs: "string", bodyLimit: FORM_LIMIT }, (_req, _body, done) => done(null, undefined));

  app.setErrorHandler((err: unknown, request, reply) => {
    if (err instanceof OAuthRequestError) return sendError(reply, err.oauth);
    const status = (err as { statusCode?: number }).statusCode;
    if (status !== undefined && status >= 400 && status < 500) {
      const registration = request.url.startsWith("/oauth2/register");
      // RFC 6749 5.2 / RFC 7591 3.2.2 define no 413: an oversized body is a 400 that says so.
      const description = (err as { code?: string }).code === "FST_ERR_CTP_BODY_TOO_LARGE" ? "request body too large" : "malformed request";
      return sendError(reply, { status: 400, error: registration ? "invalid_client_metadata" : "invalid_request", description });
    }
    const reason = noteRefusal(request, err);
    const e = oauthErrorFrom(err);
    // Shed load is an answer to the callers' load, like a rate limit: not a failure of ours.
    if (e.status >= 500 && !isOutage(err) && reason !== Reason.OVERLOADED) request.log.error({ err }, "oauth endpoint failure");
    return sendError(reply, e);
  });

  function sendError(reply: FastifyReply, e: OAuthError & { retryAfterSeconds?: number }) {
    if (e.status === 401) reply.header("www-authenticate", `Basic realm="${options.realm}"`);
    return sendOAuthError(reply, e);
  }

  const scopes = Object.keys(AGENT_SCOPE_WORDS);
  // "none": public clients, registered so or named by a client ID metadata document (PKCE, no secret).
  const authMethods = ["client_secret_basic", "client_secret_post", "none"];
  const asMetadata = {
    issuer: urls.issuer,
    authorization_endpoint: `${urls.authUrl}/oauth2/authorize`,
    token_endpoint: `${urls.authUrl}/oauth2/token`,
    registration_endpoint: `${urls.authUrl}/oauth2/register`,
    revocation_endpoint: `${urls.authUrl}/oauth2/revoke`,
    jwks_uri: `${urls.baseUrl}/.well-known/agent-jwks.json`,
    scopes_supported: scopes,
    response_types_supported: ["code"],
    response_modes_supported: ["query"],
    // Said outright: OpenID Connect Discovery reads an absent request_uri_parameter_supported as true.
    request_parameter_supported: false,
    request_uri_parameter_supported: false,
    grant_types_supported: ["authorization_code", "refresh_token"],
    code_challenge_methods_supported: ["S256"],
    token_endpoint_auth_methods_supported: authMethods,
    revocation_endpoint_auth_methods_supported: authMethods,
    authorization_response_iss_parameter_supported: true,
    client_id_metadata_document_supported: true,
  };
  app.get("/.well-known/oauth-authorization-server", async (_request, reply) => reply.header("cache-control", "public, max-age=300").send(asMetadata));

  const protectedResource = (resource: string, resourceScopes: readonly string[] = scopes) => ({
    resource,
    authorization_servers: [urls.issuer],
    scopes_supported: resourceScopes,
    bearer_methods_supported: ["header"],
    resource_name: "Vaultgate agent tools",
  });
  app.get("/.well-known/oauth-protected-resource", async (_request, reply) =>
    reply.header("cache-control", "public, max-age=300").send(protectedResource(urls.mcpUrl)),
  );
  // RFC 9728 3.1: the path of the resource follows the well-known suffix.
  for (const { path, category } of MCP_ENDPOINTS) {
    app.get(`/.well-known/oauth-protected-resource${path}`, async (_request, reply) =>
      reply.header("cache-control", "public, max-age=300").send(protectedResource(urls.mcpUrl + path, MCP_CATEGORY_SCOPES[category])),
    );
  }

  app.post("/oauth2/register", { bodyLimit: JSON_LIMIT }, async (request, reply) => {
    const body = readJson(request);
    const res = await grants.registerClient(
      {
        clientName: optString(body, "client_name"),
        redirectUris: optStringArray(body, "redirect_uris", "invalid_redirect_uri"),
        grantTypes: optStringArray(body, "grant_types"),
        responseTypes: optStringArray(body, "response_types"),
        tokenEndpointAuthMethod: optString(body, "token_endpoint_auth_method"),
        scope: optScope(body),
      },
      // TRUST_PROXY decides whether a forwarding header may name the address.
      forRequest(request),
    );
    const c = res.client!;
    return reply
      .code(201)
      .header("cache-control", "no-store")
      .header("pragma", "no-cache")
      .send({
        client_id: c.clientId,
        // RFC 7591 3.2.1: a public client is issued no secret, so neither member is sent.
        ...(res.clientSecret ? { client_secret: res.clientSecret, client_secret_expires_at: 0 } : {}),
        client_id_issued_at: Number(c.clientIdIssuedAt),
        client_name: c.clientName,
        redirect_uris: c.redirectUris,
        grant_types: c.grantTypes,
        response_types: c.responseTypes,
        token_endpoint_auth_method: c.tokenEndpointAuthMethod,
        scope: c.scopes.join(" "),
      });
  });

  app.post("/oauth2/token", { bodyLimit: FORM_LIMIT }, async (request, reply) => {
    const form = readForm(request);
    const client = authenticateClient(request, form.params);
    const grantType = form.params.get("grant_type");
    if (!grantType) throw invalidRequest("grant_type is required");
    let token: TokenResponse | undefined;
    if (grantType === "authorization_code") {
      const code = required(form.params, "code");
      // RFC 6749 4.1.3: required only when the authorization request named one; core compares.
      const redirectUri = form.params.get("redirect_uri") ?? "";
      const codeVerifier = required(form.params, "code_verifier");
      ({ token } = await grants.exchangeCode({ ...client, code, redirectUri, codeVerifier, resources: form.resources }, forRequest(request)));
    } else if (grantType === "refresh_token") {
      const refreshToken = required(form.params, "refresh_token");
      const scope = form.params.get("scope") ?? "";
      ({ token } = await grants.refreshGrant({ ...client, refreshToken, scope, resources: form.resources }, forRequest(request)));
    } else {
      throw new OAuthRequestError({ status: 400, error: "unsupported_grant_type", description: "grant_type must be authorization_code or refresh_token" });
    }
    return reply.header("cache-control", "no-store").header("pragma", "no-cache").send(agentTokenJson(token));
  });

  app.post("/oauth2/revoke", { bodyLimit: FORM_LIMIT }, async (request, reply) => {
    const form = readForm(request);
    const client = authenticateClient(request, form.params);
    const token = required(form.params, "token");
    // A revocation runs even if the client has left: it asked for it, and it must not outlive it.
    await grants.revokeToken({ ...client, token, tokenTypeHint: form.params.get("token_type_hint") ?? "" }, withRequestId(request.id, request.clientAddress));
    // RFC 7009 2.2: 200 with an empty body, whether or not the token was known.
    return reply.header("cache-control", "no-store").code(200).send();
  });
}

function readForm(request: FastifyRequest) {
  const type = (request.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== FORM_TYPE) throw invalidRequest(`content type must be ${FORM_TYPE}`);
  if (request.body === NOT_UTF8) throw invalidRequest(NOT_UTF8_MESSAGE);
  const body = typeof request.body === "string" ? request.body : "";
  const parsed = parseForm(body, { repeatable: REPEATABLE, omitEmpty: true });
  if (!parsed.ok) throw invalidRequest(parsed.message);
  if (parsed.duplicates.length > 0) throw invalidRequest(`repeated parameter: ${parsed.duplicates[0]}`);
  const resources = parsed.lists.get("resource") ?? [];
  return { params: parsed.params, resources };
}

function required(params: Map<string, string>, name: string): string {
  const v = params.get(name);
  if (!v) throw invalidRequest(`${name} is required`);
  return v;
}

/**
 * RFC 6749 2.3.1: client_secret_basic (form-encoded parts) or client_secret_post; never both.
 * A public client (2.1: registered with method none, or a metadata document URL) sends
 * client_id alone: core decides, and any other client without its secret is invalid_client.
 */
function authenticateClient(request: FastifyRequest, params: Map<string, string>): { clientId: string; clientSecret: string } {
  const header = request.headers.authorization;
  const formUsed = params.has("client_secret");
  if (header !== undefined) {
    if (formUsed) throw invalidRequest("use one client authentication method, not both");
    const credentials = parseBasicCredentials(header);
    if (!credentials) throw invalidClient();
    const { clientId, clientSecret } = credentials;
    const formId = params.get("client_id");
    if (formId !== undefined && formId !== clientId) throw invalidRequest("client_id does not match the authenticated client");
    return { clientId, clientSecret };
  }
  const clientId = params.get("client_id");
  const clientSecret = params.get("client_secret");
  if (!clientId) throw invalidClient();
  return { clientId, clientSecret: clientSecret ?? "" };
}

type JsonObject = Record<string, unknown>;
const badMetadata = (description: string, error = "invalid_client_metadata") => new OAuthRequestError({ status: 400, error, description });

function readJson(request: FastifyRequest): JsonObject {
  const type = (request.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== "application/json") throw badMetadata("content type must be application/json");
  if (request.body === NOT_UTF8) throw badMetadata(NOT_UTF8_MESSAGE);
  const text = typeof request.body === "string" ? request.body : "";
  if (jsonTooDeep(text)) throw badMetadata(TOO_DEEP);
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw badMetadata("body is not valid JSON");
  }
  const repeated = repeatedMember(text);
  if (repeated !== undefined) throw badMetadata(repeatedMemberMessage(repeated));
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw badMetadata("body must be a JSON object");
  const badText = findBadText(body);
  if (badText) throw badMetadata(badText.message);
  return body as JsonObject;
}

function optString(body: JsonObject, name: string): string {
  const v = body[name];
  if (v === undefined || v === null) return "";
  if (typeof v !== "string") throw badMetadata(`${name} must be a string`);
  return v;
}

/** Core receives an omitted scope as ""; one sent as "" names nothing and is refused like a blank one. */
function optScope(body: JsonObject): string {
  const scope = optString(body, "scope");
  if (scope === "" && body.scope === "") throw badMetadata("scope names no scope: leave it out for the default, or name scopes");
  return scope;
}

function optStringArray(body: JsonObject, name: string, error = "invalid_client_metadata"): string[] {
  const v = body[name];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.some((x) => typeof x !== "string")) throw badMetadata(`${name} must be an array of strings`, error);
  return v as string[];
}
