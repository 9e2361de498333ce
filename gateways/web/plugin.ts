import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { ConnectError, type Client } from "@connectrpc/connect";
import { ErrorDetailSchema, Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { GrantsService, WebSession } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import type { BudgetsService } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { withRequestId } from "../core-clients.js";
import { parseForm } from "../shared/form.js";
import type { PublicUrls } from "../shared/public-urls.js";
import { html, page, type Html } from "./html.js";
import { authorizeRoutes } from "./authorize-routes.js";
import { approvalRoutes } from "./approval-routes.js";
import { dashboardRoutes } from "./dashboard-routes.js";
import { signInRoutes } from "./signin-routes.js";
import { noteRefusal } from "../request-log.js";

export interface WebGatewayOptions {
  grants: Client<typeof GrantsService>;
  budgets: Client<typeof BudgetsService>;
  urls: PublicUrls;
}

const FORM_TYPE = "application/x-www-form-urlencoded";
const FORM_LIMIT = 16 * 1024;
export const SESSION_COOKIE = "vg_session";
const CSRF_COOKIE = "vg_csrf";

/** A page-level failure with a status and words for people (never internals). */
export class PageError extends Error {
  constructor(
    readonly status: number,
    readonly title: string,
    readonly detail: string,
  ) {
    super(title);
  }
}

/** The words of the 400 page for an address that is not valid percent-encoding. */
export const BAD_ADDRESS = {
  title: "Something is wrong with this request",
  detail: "The address contains characters that are not allowed. Check the link, or start again from your dashboard.",
};

/** Headers of every page: no caching, no framing, no scripts, no referrer. */
export function setPageHeaders(reply: FastifyReply): void {
  reply.header("cache-control", "no-store");
  // No referrer leaves our origin: the consent URL carries state and the redirect carries
  // the code. "same-origin" rather than "no-referrer": with no-referrer browsers send
  // `Origin: null` on our own form posts, which the Origin check must refuse.
  reply.header("referrer-policy", "same-origin");
  reply.header("x-frame-options", "DENY");
  reply.header("content-security-policy", "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'");
}

/** True when the query of `url` (if any) is valid percent-encoded UTF-8 (RFC 3986 2.1). */
export function wellFormedQuery(url: string): boolean {
  const q = url.indexOf("?");
  if (q === -1) return true;
  try {
    decodeURIComponent(url.slice(q + 1));
    return true;
  } catch {
    return false;
  }
}

/** Reason -> page; `undefined` renders the generic 500 page. Exhaustive, so a new Reason is a compile error. */
const GENERIC = undefined;
const pageTable = {
  [Reason.UNSPECIFIED]: GENERIC,
  [Reason.INVALID_REQUEST]: { status: 400, title: "Something is wrong with this request" },
  [Reason.NOT_FOUND]: { status: 404, title: "Not found" },
  [Reason.INTERNAL]: GENERIC,
  [Reason.RATE_LIMITED]: { status: 429, title: "Too many attempts" },
  [Reason.OVERLOADED]: { status: 503, title: "Temporarily unavailable" },
  [Reason.UNAVAILABLE]: { status: 503, title: "Temporarily unavailable" },
  [Reason.IDEMPOTENCY_CONFLICT]: GENERIC,
  [Reason.ADMIN_UNAUTHENTICATED]: GENERIC,
  [Reason.INVALID_CLIENT]: { status: 400, title: "Unknown application" },
  [Reason.CLIENT_INACTIVE]: { status: 400, title: "Unknown application" },
  [Reason.UNSUPPORTED_GRANT_TYPE]: GENERIC,
  [Reason.INVALID_SCOPE]: { status: 400, title: "This application asked for permissions it may not have" },
  [Reason.SIGNING_UNAVAILABLE]: { status: 503, title: "Temporarily unavailable" },
  [Reason.INVALID_GRANT]: { status: 400, title: "That code is invalid or expired" },
  [Reason.INVALID_CLIENT_METADATA]: GENERIC,
  [Reason.INVALID_REDIRECT_URI]: { status: 400, title: "This application sent an unregistered return address" },
  [Reason.ACCESS_DENIED]: { status: 403, title: "Not allowed" },
  [Reason.INVALID_TARGET]: { status: 400, title: "That vault cannot be used here" },
  [Reason.INVALID_TOKEN]: GENERIC,
  [Reason.AUTH_UNAVAILABLE]: { status: 503, title: "Temporarily unavailable" },
  [Reason.GRANT_REQUIRED]: GENERIC,
  [Reason.PARTNER_INACTIVE]: GENERIC,
  [Reason.USER_INACTIVE]: { status: 403, title: "This account is not active" },
  [Reason.USER_NOT_FOUND]: { status: 404, title: "Not found" },
  [Reason.KYC_PROVIDER_CONFLICT]: GENERIC,
  [Reason.AUDIT_UNAVAILABLE]: { status: 503, title: "Temporarily unavailable" },
  [Reason.PROVIDER_UNAVAILABLE]: { status: 503, title: "Temporarily unavailable" },
  [Reason.INVALID_CURSOR]: GENERIC,
  [Reason.INSUFFICIENT_SCOPE]: GENERIC,
  [Reason.TREASURY_INACTIVE]: GENERIC,
  [Reason.PAYER_NOT_ALLOWED]: GENERIC,
  [Reason.POLICY_DENIED]: GENERIC,
  [Reason.TREASURY_NOT_CONFIGURED]: GENERIC,
  [Reason.INSUFFICIENT_FUNDS]: GENERIC,
  [Reason.EXECUTION_CONFLICT]: GENERIC,
  [Reason.VAULT_CONTENTION]: GENERIC,
  [Reason.PROVISIONING_FAILED]: GENERIC,
  [Reason.WRONG_ENDPOINT]: GENERIC,
} satisfies Record<Reason, { status: number; title: string } | undefined>;

/** What every web route shares: cookies, CSRF, the session, rendering. */
export interface WebContext {
  grants: Client<typeof GrantsService>;
  budgets: Client<typeof BudgetsService>;
  urls: PublicUrls;
  rpc: (request: FastifyRequest) => ReturnType<typeof withRequestId>;
  readForm(request: FastifyRequest, repeatable?: string[]): { params: Map<string, string>; all(name: string): string[] };
  csrfToken(request: FastifyRequest, reply: FastifyReply): string;
  checkCsrf(request: FastifyRequest, form: Map<string, string>): void;
  session(request: FastifyRequest): Promise<{ token: string; session: WebSession } | undefined>;
  /** The session cookie's value as presented, unchecked (sign-out hands it to core). */
  sessionToken(request: FastifyRequest): string | undefined;
  setSession(reply: FastifyReply, token: string, maxAgeSeconds: number): void;
  clearSession(reply: FastifyReply): void;
  send(reply: FastifyReply, status: number, title: string, body: Html, nav?: { email?: string; csrf?: string }): FastifyReply;
  signInRedirect(reply: FastifyReply, returnTo: string): FastifyReply;
}

/**
 * Server-rendered pages on {app_url} and {auth_url} (DESIGN 4.2): sign-in, step-up,
 * consent and the dashboard. No scripts; every form carries a CSRF token; every value
 * is escaped by the html template tag.
 */
export async function webGateway(app: FastifyInstance, options: WebGatewayOptions) {
  const secureCookies = options.urls.appUrl.startsWith("https:");
  // Over https the names carry __Host-: browsers then keep them only when Secure, Path=/
  // and host-only, so a sibling subdomain can neither plant nor shadow them. Browsers
  // refuse Secure cookies over plain http (the loopback default), which keeps plain names.
  const sessionCookie = secureCookies ? `__Host-${SESSION_COOKIE}` : SESSION_COOKIE;
  const csrfCookie = secureCookies ? `__Host-${CSRF_COOKIE}` : CSRF_COOKIE;
  app.addContentTypeParser(FORM_TYPE, { parseAs: "string", bodyLimit: FORM_LIMIT }, (_req, body, done) => done(null, body));

  app.addHook("onSend", async (_request, reply) => {
    setPageHeaders(reply);
  });
  // A query that is not percent-encoded UTF-8 cannot be read reliably (fastify's parser
  // and URLSearchParams both guess), so no parameter of it is trusted: a 400 page. So is
  // an encoded NUL anywhere in the address (no text we keep may hold one); decoding cannot
  // yield an unpaired surrogate, since those are not UTF-8.
  app.addHook("onRequest", async (request) => {
    if (!wellFormedQuery(request.url) || /%00/.test(request.url)) throw new PageError(400, BAD_ADDRESS.title, BAD_ADDRESS.detail);
  });

  const cookie = (name: string, value: string, maxAge: number) =>
    `${name}=${value}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${maxAge}${secureCookies ? "; Secure" : ""}`;
  const addCookie = (reply: FastifyReply, value: string) => {
    const prev = reply.getHeader("set-cookie");
    reply.header("set-cookie", prev === undefined ? [value] : [...(Array.isArray(prev) ? prev : [String(prev)]), value]);
  };

  const ctx: WebContext = {
    grants: options.grants,
    budgets: options.budgets,
    urls: options.urls,
    rpc: (request) => withRequestId(request.id),
    readForm(request, repeatable = []) {
      const type = (request.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
      if (type !== FORM_TYPE || typeof request.body !== "string") throw new PageError(400, "Something is wrong with this request", "The form could not be read.");
      const parsed = parseForm(request.body);
      if (!parsed.ok) throw new PageError(400, "Something is wrong with this request", parsed.message === "malformed form body" ? "The form could not be read." : `The form field ${parsed.message}.`);
      const repeated = parsed.duplicates.filter((d) => !repeatable.includes(d));
      if (repeated.length > 0) throw new PageError(400, "Something is wrong with this request", "A form field was repeated.");
      const body = request.body;
      return {
        params: parsed.params,
        all: (name) => [...new URLSearchParams(body).getAll(name)],
      };
    },
    csrfToken(request, reply) {
      // Signed in: the token is derived from the HttpOnly session cookie, so a cookie an
      // attacker managed to plant (vg_csrf) cannot authorize actions in the user's session.
      const sessionToken = readCookies(request)[sessionCookie];
      if (sessionToken) return sessionCsrf(sessionToken);
      const existing = readCookies(request)[csrfCookie];
      if (existing && /^[A-Za-z0-9_-]{43}$/.test(existing)) return existing;
      const token = randomBytes(32).toString("base64url");
      addCookie(reply, cookie(csrfCookie, token, 86400));
      return token;
    },
    checkCsrf(request, form) {
      // Signed out: double-submit (the form field must equal the HttpOnly SameSite cookie).
      const cookies = readCookies(request);
      const expected = cookies[sessionCookie] ? sessionCsrf(cookies[sessionCookie]) : (cookies[csrfCookie] ?? "");
      const given = form.get("csrf") ?? "";
      if (!expected || !sameSecret(expected, given)) {
        throw new PageError(403, "This form has expired", "Go back, reload the page and try again.");
      }
    },
    async session(request) {
      const token = readCookies(request)[sessionCookie];
      if (!token || token.length > 200) return undefined;
      try {
        const res = await options.grants.getSession({ sessionToken: token }, withRequestId(request.id));
        return { token, session: res.session! };
      } catch (err) {
        if (noteRefusal(request, err) === Reason.INVALID_TOKEN) return undefined;
        throw err;
      }
    },
    sessionToken(request) {
      return readCookies(request)[sessionCookie] || undefined;
    },
    setSession(reply, token, maxAge) {
      addCookie(reply, cookie(sessionCookie, token, maxAge));
    },
    clearSession(reply) {
      addCookie(reply, cookie(sessionCookie, "", 0));
    },
    send(reply, status, title, body, nav) {
      return reply.code(status).type("text/html; charset=utf-8").send(page(title, body, nav));
    },
    signInRedirect(reply, returnTo) {
      return reply.redirect(`/signin?return_to=${encodeURIComponent(safeReturnTo(returnTo))}`, 303);
    },
  };

  app.setErrorHandler((err: unknown, request, reply) => {
    if (err instanceof PageError) return ctx.send(reply, err.status, err.title, html`<div class="card error"><p>${err.detail}</p><p><a href="/dashboard/agents">Go to your agents</a></p></div>`);
    const status = (err as { statusCode?: number }).statusCode;
    if (!(err instanceof ConnectError) && status !== undefined && status >= 400 && status < 500) {
      return ctx.send(reply, 400, "Something is wrong with this request", html`<div class="card error"><p>The request could not be read.</p></div>`);
    }
    const reason = noteRefusal(request, err);
    if (reason === Reason.INVALID_TOKEN) {
      ctx.clearSession(reply);
      return ctx.signInRedirect(reply, request.method === "GET" ? request.url : "/dashboard/agents");
    }
    const row: { status: number; title: string } | undefined = reason !== undefined ? pageTable[reason] : undefined;
    if (!row) {
      request.log.error({ err }, "page failure");
      return ctx.send(reply, 500, "Something went wrong", html`<div class="card error"><p>Please try again. Reference: <code>${request.id}</code></p></div>`);
    }
    const message = err instanceof ConnectError && row.status < 500 ? err.rawMessage : "Please try again in a moment.";
    const retryAfter = err instanceof ConnectError ? err.findDetails(ErrorDetailSchema)[0]?.retryAfterSeconds : undefined;
    if ((row.status === 503 || row.status === 429) && retryAfter) reply.header("retry-after", String(retryAfter));
    return ctx.send(reply, row.status, row.title, html`<div class="card error"><p>${message}</p><p><a href="/dashboard/agents">Go to your agents</a></p></div>`);
  });

  await signInRoutes(app, ctx);
  await authorizeRoutes(app, ctx);
  await dashboardRoutes(app, ctx);
  await approvalRoutes(app, ctx);
}

/** Only same-origin paths: no scheme, no `//host`, no backslashes (open-redirect guard). */
export function safeReturnTo(value: string | undefined): string {
  if (!value || !value.startsWith("/") || value.startsWith("//") || value.includes("\\") || /[\u0000-\u001f]/.test(value)) return "/dashboard/agents";
  return value;
}

function readCookies(request: FastifyRequest): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (request.headers.cookie ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq === -1) continue;
    const name = part.slice(0, eq).trim();
    if (!(name in out)) out[name] = part.slice(eq + 1).trim();
  }
  return out;
}

function sessionCsrf(sessionToken: string): string {
  return createHash("sha256").update(`csrf:${sessionToken}`).digest("base64url");
}

function sameSecret(a: string, b: string): boolean {
  const ha = createHash("sha256").update(a).digest();
  const hb = createHash("sha256").update(b).digest();
  return timingSafeEqual(ha, hb);
}
