import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import type { Client } from "@connectrpc/connect";
import type { PartnersService } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { forRequest } from "../core-clients.js";
import { parseForm } from "../shared/form.js";
import { refuseEncodedBodies } from "../shared/content-encoding.js";
import { basicClientId, parseBasicCredentials } from "../shared/basic-auth.js";
import { oauthErrorFrom, sendOAuthError, type OAuthError } from "../shared/oauth-error.js";
import { noteRefusal } from "../request-log.js";
import { dropEmptyContentType } from "./content-type.js";
import { NOT_UTF8, NOT_UTF8_MESSAGE, utf8Parser } from "../shared/utf8.js";

export interface TokenRouteOptions {
  partners: Client<typeof PartnersService>;
  /** Realm of `WWW-Authenticate: Basic` on 401. */
  realm: string;
}

/** The token endpoint's path under the partner prefix. */
export const TOKEN_PATH = "/oauth/token";

/** The form body limit. */
const FORM_LIMIT = 4096;
const FORM_TYPE = "application/x-www-form-urlencoded";

/** Thrown by a check to answer with a flat OAuth error. */
class TokenRequestError extends Error {
  constructor(readonly oauth: OAuthError) {
    super(oauth.error);
  }
}

const invalidRequest = (description: string) => new TokenRequestError({ status: 400, error: "invalid_request", description });
const invalidClient = () => new TokenRequestError({ status: 401, error: "invalid_client", description: "client authentication failed" });

interface Credentials {
  clientId: string;
  clientSecret: string;
}

/** POST /oauth/token: partner client_credentials. */
export async function tokenRoute(app: FastifyInstance, options: TokenRouteOptions) {
  app.addHook(
    "onRequest",
    refuseEncodedBodies((description) => new TokenRequestError({ status: 415, error: "invalid_request", description })),
  );
  app.addHook("onRequest", dropEmptyContentType);
  // Raw string so duplicates and malformed encoding can be seen (fastify's parsers hide them).
  app.addContentTypeParser(FORM_TYPE, { parseAs: "buffer", bodyLimit: FORM_LIMIT }, utf8Parser);
  // Any other content type reaches the handler, which refuses it as invalid_request.
  app.addContentTypeParser("*", { parseAs: "string", bodyLimit: FORM_LIMIT }, (_req, _body, done) => done(null, undefined));

  app.setErrorHandler((err: unknown, request, reply) => {
    if (err instanceof TokenRequestError) return sendTokenError(reply, err.oauth, options.realm);
    const status = (err as { statusCode?: number }).statusCode;
    if (status !== undefined && status >= 400 && status < 500) {
      // Body too large, bad content length and similar edge failures; RFC 6749 defines no 413.
      const tooLarge = (err as { code?: string }).code === "FST_ERR_CTP_BODY_TOO_LARGE";
      const description = tooLarge ? `request body is over ${FORM_LIMIT} bytes` : "malformed request";
      return sendTokenError(reply, { status: 400, error: "invalid_request", description }, options.realm);
    }
    // A refusal with a domain reason (wrong secret, rate limited, overloaded...) is named in
    // the request's one line; only bugs and an unreachable core are errors worth a stack.
    if (noteRefusal(request, err) === undefined) request.log.error({ err }, "token endpoint failure");
    return sendTokenError(reply, oauthErrorFrom(err), options.realm);
  });

  app.post(TOKEN_PATH, { bodyLimit: FORM_LIMIT }, async (request, reply) => {
    const params = readForm(request);
    rejectDuplicates(params.duplicates);
    const credentials = authenticateClient(request, params.params);
    const scope = checkGrantType(params.params);
    const token = await options.partners.issueToken({ clientId: credentials.clientId, clientSecret: credentials.clientSecret, scope }, forRequest(request));
    return reply
      .header("cache-control", "no-store")
      .header("pragma", "no-cache")
      .send({ access_token: token.accessToken, token_type: token.tokenType, expires_in: Number(token.expiresIn), scope: token.scope });
  });
}

/** Another method on the token endpoint: 405 in the endpoint's own flat OAuth envelope. */
export function sendTokenMethodNotAllowed(reply: FastifyReply, allowed: string) {
  return sendOAuthError(reply.header("allow", allowed), { status: 405, error: "invalid_request", description: `this endpoint answers ${allowed} only` });
}

function sendTokenError(reply: FastifyReply, e: OAuthError & { retryAfterSeconds?: number }, realm: string) {
  // 401 carries the Basic challenge, whichever method the client used.
  if (e.status === 401) reply.header("www-authenticate", `Basic realm="${realm}"`);
  return sendOAuthError(reply, e);
}

function readForm(request: FastifyRequest) {
  const type = (request.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
  if (type !== FORM_TYPE) throw invalidRequest(`content type must be ${FORM_TYPE}`);
  if (request.body === NOT_UTF8) throw invalidRequest(NOT_UTF8_MESSAGE);
  const parsed = parseForm(typeof request.body === "string" ? request.body : "");
  if (!parsed.ok) throw invalidRequest(parsed.message);
  return parsed;
}

function rejectDuplicates(duplicates: string[]) {
  if (duplicates.length > 0) throw invalidRequest(`repeated parameter: ${duplicates[0]}`);
}

/** RFC 6749 2.3.1: HTTP Basic with form-encoded parts, or form fields; never both. */
function authenticateClient(request: FastifyRequest, params: Map<string, string>): Credentials {
  const header = request.headers.authorization;
  const formUsed = params.has("client_id") || params.has("client_secret");
  if (header !== undefined) {
    if (formUsed) throw invalidRequest("use one client authentication method, not both");
    const credentials = parseBasicCredentials(header);
    if (credentials) return credentials;
    // A secret part that does not decode cannot be right; with a readable client id it is
    // checked as a wrong secret, so it counts against that client's limit and is audited.
    const clientId = basicClientId(header);
    if (clientId === undefined || clientId === "") throw invalidClient();
    return { clientId, clientSecret: "" };
  }
  return { clientId: params.get("client_id") ?? "", clientSecret: params.get("client_secret") ?? "" };
}

/** Returns the optional scope once the grant type is known to be client_credentials. */
function checkGrantType(params: Map<string, string>): string | undefined {
  const grantType = params.get("grant_type");
  if (grantType === undefined || grantType === "") throw invalidRequest("grant_type is required");
  if (grantType !== "client_credentials") {
    throw new TokenRequestError({ status: 400, error: "unsupported_grant_type", description: "only client_credentials is supported" });
  }
  return params.get("scope");
}
