import { randomBytes } from "node:crypto";
import type { FastifyReply, FastifyRequest } from "fastify";
import type { Client } from "@connectrpc/connect";
import type { GrantsService } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import type { WebSession } from "../../gen/vaultgate/grants/v1/signin_pb.js";
import type { BudgetsService } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { constantTimeEqual, hmacSha256, sha256Base64url } from "../../lib/crypto.js";
import { UUID } from "../../lib/uuid.js";
import { KNOWN_BROWSER_SECONDS } from "../../lib/vocabulary.js";
import { withRequestId } from "../core-clients.js";
import { parseForm } from "../shared/form.js";
import type { PublicUrls } from "../shared/public-urls.js";
import { noteRefusal } from "../request-log.js";
import { page, type Html } from "./views/html.js";
import { AGENTS_PATH, agentPath, MONEY_PATH, signInPath } from "./paths.js";

export const FORM_TYPE = "application/x-www-form-urlencoded";
const SESSION_COOKIE = "vg_session";
/** Marks a browser the person signed in with: its own code sign-in budget (kept across sign-outs). */
const BROWSER_COOKIE = "vg_browser";
const CSRF_COOKIE = "vg_csrf";
/** A one-time notice an action leaves for the page it redirects to (flash cookie). */
const NOTICE_COOKIE = "vg_notice";
const NOTICE_SECONDS = 60;
/** A notice's name, for some the id it speaks of (an agent's), and its tag binding it to the session. */
const NOTICE_VALUE = /^([a-z][a-z-]{0,39}(?:\.[0-9a-f-]{36})?)\.([A-Za-z0-9_-]{43})$/;

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

/**
 * Route options of a GET that starts or finishes a ceremony (a flow row, a one-time callback): no automatic
 * HEAD twin, so a link checker's HEAD gets 405 instead of spending the person's flow.
 */
export const STARTS_A_CEREMONY = { exposeHeadRoute: false } as const;

/** Headers of every page: no caching, no framing, no scripts, no referrer. */
export function setPageHeaders(reply: FastifyReply): void {
  reply.header("cache-control", "no-store");
  // No referrer leaves our origin: the consent URL carries state and the redirect carries
  // the code. "same-origin", since with no-referrer browsers send `Origin: null` on our own
  // form posts, which the Origin check must refuse.
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

/**
 * Only same-origin paths: no scheme, no `//host`, no backslashes (open-redirect guard), and only
 * printable ASCII, which a Location header can carry (our own links are always percent-encoded).
 * Dot segments (`/.//host`, `/%2e%2e//host`) must not leave a path a browser then reads as `//host`.
 */
export function safeReturnTo(value: string | undefined): string {
  if (!value?.startsWith("/") || value.startsWith("//") || value.includes("\\") || /[^\u0021-\u007e]/.test(value)) return AGENTS_PATH;
  if (new URL(value, "http://app.invalid").pathname.startsWith("//")) return AGENTS_PATH;
  return value;
}

/**
 * Pages a money form may return to: the money view or an agent's page (never another origin).
 * UUIDs are case-insensitive, so an agent id in any case names the same page, given in lower case.
 */
export function moneyReturnTo(value: string | undefined): string {
  const prefix = `${AGENTS_PATH}/`;
  const id = value?.startsWith(prefix) ? value.slice(prefix.length) : undefined;
  return id && UUID.test(id) ? agentPath(id.toLowerCase()) : MONEY_PATH;
}

/** A signed-in user: the session cookie's token and what core says of it. */
export type Current = { token: string; session: WebSession };

/** What every web route shares: the core clients, cookies, CSRF, the session, rendering. */
export interface WebContext {
  grants: Client<typeof GrantsService>;
  budgets: Client<typeof BudgetsService>;
  urls: PublicUrls;
  /** SIGNIN_METHODS, in the order the sign-in page offers them. */
  signinMethods: readonly string[];
  rpc: (request: FastifyRequest) => ReturnType<typeof withRequestId>;
  readForm(request: FastifyRequest, repeatable?: string[]): { params: Map<string, string> };
  csrfToken(request: FastifyRequest, reply: FastifyReply): string;
  checkCsrf(request: FastifyRequest, form: Map<string, string>): void;
  session(request: FastifyRequest): Promise<Current | undefined>;
  /** The session cookie's value as presented, unchecked (sign-out hands it to core). */
  sessionToken(request: FastifyRequest): string | undefined;
  /** The known-browser cookie as presented ("" when none), for the code sign-in RPCs. */
  browserToken(request: FastifyRequest): string;
  /** Sets the cookies of a sign-in: its session and the known-browser mark. Core ended the session it replaces. */
  setSession(reply: FastifyReply, signedIn: { sessionToken: string; expiresIn: bigint; browserToken: string }): void;
  clearSession(reply: FastifyReply): void;
  /**
   * Leaves `notice` for the next page, bound to the request's session: only an action that happened
   * sets it, so neither a link nor a cookie planted by a same-site origin (plain http) can forge one.
   */
  notify(reply: FastifyReply, notice: string): void;
  /** The notice an action left in this session (cleared as it is read, so it shows once), or undefined. */
  takeNotice(request: FastifyRequest, reply: FastifyReply): string | undefined;
  send(reply: FastifyReply, status: number, title: string, body: Html, nav?: { email?: string; csrf?: string }): FastifyReply;
  signInRedirect(reply: FastifyReply, returnTo: string): FastifyReply;
}

export interface WebContextOptions {
  grants: Client<typeof GrantsService>;
  budgets: Client<typeof BudgetsService>;
  urls: PublicUrls;
  signinMethods?: readonly string[];
}

export function createWebContext(options: WebContextOptions): WebContext {
  const secureCookies = options.urls.appUrl.startsWith("https:");
  // Over https the names carry __Host-: browsers then keep them only when Secure, Path=/
  // and host-only, so a sibling subdomain can neither plant nor shadow them (plain http,
  // the loopback default, cannot hold Secure cookies and keeps plain names).
  const sessionCookie = secureCookies ? `__Host-${SESSION_COOKIE}` : SESSION_COOKIE;
  const csrfCookie = secureCookies ? `__Host-${CSRF_COOKIE}` : CSRF_COOKIE;
  const browserCookie = secureCookies ? `__Host-${BROWSER_COOKIE}` : BROWSER_COOKIE;
  const noticeCookie = secureCookies ? `__Host-${NOTICE_COOKIE}` : NOTICE_COOKIE;
  const cookie = (name: string, value: string, maxAge: number, sameSite = "Lax") =>
    `${name}=${value}; Path=/; HttpOnly; SameSite=${sameSite}; Max-Age=${maxAge}${secureCookies ? "; Secure" : ""}`;
  // fastify appends every set-cookie value to those already set.
  const addCookie = (reply: FastifyReply, value: string) => reply.header("set-cookie", value);

  const signinMethods = options.signinMethods ?? ["email"];

  return {
    grants: options.grants,
    budgets: options.budgets,
    urls: options.urls,
    signinMethods,
    rpc: (request) => withRequestId(request.id, request.clientAddress),
    readForm(request, repeatable = []) {
      const type = (request.headers["content-type"] ?? "").split(";")[0]!.trim().toLowerCase();
      if (type !== FORM_TYPE || typeof request.body !== "string")
        throw new PageError(400, "Something is wrong with this request", "The form could not be read.");
      const parsed = parseForm(request.body);
      if (!parsed.ok)
        throw new PageError(
          400,
          "Something is wrong with this request",
          parsed.message === "malformed form body" ? "The form could not be read." : `The form field ${parsed.message}.`,
        );
      const repeated = parsed.duplicates.filter((d) => !repeatable.includes(d));
      if (repeated.length > 0) throw new PageError(400, "Something is wrong with this request", "A form field was repeated.");
      return { params: parsed.params };
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
      if (!expected || !constantTimeEqual(expected, given)) {
        throw new PageError(403, "This form has expired", "Go back, reload the page and try again.");
      }
    },
    async session(request) {
      const token = readCookies(request)[sessionCookie];
      if (!token || token.length > 200) return undefined;
      try {
        const res = await options.grants.getSession({ sessionToken: token }, withRequestId(request.id, request.clientAddress));
        return { token, session: res.session! };
      } catch (err) {
        if (noteRefusal(request, err) === Reason.INVALID_TOKEN) return undefined;
        throw err;
      }
    },
    sessionToken(request) {
      return readCookies(request)[sessionCookie] || undefined;
    },
    browserToken(request) {
      return readCookies(request)[browserCookie] ?? "";
    },
    setSession(reply, signedIn) {
      addCookie(reply, cookie(sessionCookie, signedIn.sessionToken, Number(signedIn.expiresIn)));
      if (signedIn.browserToken) addCookie(reply, cookie(browserCookie, signedIn.browserToken, KNOWN_BROWSER_SECONDS));
    },
    clearSession(reply) {
      addCookie(reply, cookie(sessionCookie, "", 0));
    },
    notify(reply, notice) {
      const session = readCookies(reply.request)[sessionCookie] ?? "";
      addCookie(reply, cookie(noticeCookie, `${notice}.${noticeTag(session, notice)}`, NOTICE_SECONDS, "Strict"));
    },
    takeNotice(request, reply) {
      const cookies = readCookies(request);
      const value = cookies[noticeCookie];
      if (value === undefined) return undefined;
      // A HEAD (a link preview, a prefetch) shows nobody the notice: it stays for the page itself.
      if (request.method !== "HEAD") addCookie(reply, cookie(noticeCookie, "", 0, "Strict"));
      const m = NOTICE_VALUE.exec(value);
      const session = cookies[sessionCookie];
      return m && session && constantTimeEqual(m[2]!, noticeTag(session, m[1]!)) ? m[1] : undefined;
    },
    send(reply, status, title, body, nav) {
      return reply
        .code(status)
        .type("text/html; charset=utf-8")
        .send(page(title, body, nav && { ...nav, passkeys: signinMethods.includes("passkey") }));
    },
    signInRedirect(reply, returnTo) {
      return reply.redirect(signInPath(safeReturnTo(returnTo)), 303);
    },
  };
}

/** Ceremonies of one kind a browser keeps at once (two tabs, a retry): starting one more ends them, so cookies stay few. */
export const CEREMONIES_KEPT = 4;

/** The flow keys of the cookies named `<prefix><key>` this request carries, when there are CEREMONIES_KEPT or more. */
export function ceremoniesToEnd(request: FastifyRequest, prefix: string): string[] {
  const keys = Object.keys(readCookies(request))
    .filter((name) => name.startsWith(prefix))
    .map((name) => name.slice(prefix.length));
  return keys.length >= CEREMONIES_KEPT ? keys : [];
}

export function readCookies(request: FastifyRequest): Record<string, string> {
  const out: Record<string, string> = {};
  for (const part of (request.headers.cookie ?? "").split(";")) {
    const eq = part.indexOf("=");
    if (eq === -1) continue;
    const name = part.slice(0, eq).trim();
    if (!(name in out)) out[name] = part.slice(eq + 1).trim();
  }
  return out;
}

/** Keyed by the HttpOnly session token, which a site able to plant cookies still cannot read. */
function noticeTag(sessionToken: string, notice: string): string {
  return hmacSha256(sessionToken, `notice:${notice}`, "base64url");
}

function sessionCsrf(sessionToken: string): string {
  return sha256Base64url(`csrf:${sessionToken}`);
}
