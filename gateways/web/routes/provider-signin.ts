import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { ceremoniesToEnd, readCookies, safeReturnTo, STARTS_A_CEREMONY, type WebContext } from "../context.js";
import { offerOnward } from "../page-errors.js";
import { SIGNIN_OIDC_PATH } from "../paths.js";

/** The browser's secret for one provider flow, and where to go afterwards; only the callback path sees them. */
const FLOW_COOKIE = "vg_oidc";
const RETURN_COOKIE = "vg_oidc_return";

/** A flow's cookies are named by the start of its state, so flows begun in two tabs do not spoil each other. */
const flowKey = (state: string | null | undefined) => (state && /^[A-Za-z0-9_-]{16}/.test(state) ? state.slice(0, 16) : "none");

type Query = Record<string, string | string[] | undefined>;
const q = (request: FastifyRequest, name: string) => {
  const v = (request.query as Query)[name];
  return typeof v === "string" ? v : undefined;
};

/** A cookie's percent-encoded value, or "" when it is not valid encoding (a planted or mangled cookie). */
function decoded(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return "";
  }
}

/**
 * Sign-in at the organisation's OpenID Connect provider: /signin/oidc sends the browser
 * there, /signin/oidc/callback finishes in core. Refusals and outages are pages
 * (the plugin's error handler: 403 with what to do, 503 when the provider is down).
 */
export const providerSignInRoutes: FastifyPluginAsync<{ ctx: WebContext }> = async (app, { ctx }) => {
  const secure = ctx.urls.appUrl.startsWith("https:");
  // Over https the names carry __Host- (Path=/, host-only), so a sibling subdomain cannot plant its own
  // flow's secret and sign the person in to someone else's account; plain http keeps them on the callback path.
  const flowCookie = (key: string) => `${secure ? "__Host-" : ""}${FLOW_COOKIE}.${key}`;
  const returnCookie = (key: string) => `${secure ? "__Host-" : ""}${RETURN_COOKIE}.${key}`;
  // SameSite=Lax: the provider's redirect back is a top-level navigation, which Lax lets through.
  const cookie = (name: string, value: string, maxAge: number) =>
    `${name}=${value}; Path=${secure ? "/" : SIGNIN_OIDC_PATH}; HttpOnly; SameSite=Lax; Max-Age=${maxAge}${secure ? "; Secure" : ""}`;

  app.get(SIGNIN_OIDC_PATH, STARTS_A_CEREMONY, async (request, reply) => {
    const returnTo = safeReturnTo(q(request, "return_to"));
    const current = await ctx.session(request);
    const res = await ctx.grants.startProviderSignIn({ sessionToken: q(request, "step_up") === "1" && current ? current.token : "" }, ctx.rpc(request));
    const maxAge = Number(res.expiresIn);
    const key = flowKey(new URL(res.authorizationUrl).searchParams.get("state"));
    const ended = ceremoniesToEnd(request, flowCookie("")).flatMap((k) => [cookie(flowCookie(k), "", 0), cookie(returnCookie(k), "", 0)]);
    reply.header("set-cookie", [...ended, cookie(flowCookie(key), res.flowSecret, maxAge), cookie(returnCookie(key), encodeURIComponent(returnTo), maxAge)]);
    return reply.redirect(res.authorizationUrl, 303);
  });

  // The provider sends every callback to APP_URL. A flow started on the consent page's host
  // (AUTH_URL, another host) has its cookie there: the callback is handed on to finish where it began.
  const appHost = new URL(ctx.urls.appUrl).hostname;
  const authBase = ctx.urls.authUrl.replace(/\/+$/, "");
  const handOn = new URL(ctx.urls.authUrl).hostname !== appHost;

  app.get(`${SIGNIN_OIDC_PATH}/callback`, STARTS_A_CEREMONY, async (request, reply) => {
    const cookies = readCookies(request);
    const key = flowKey(q(request, "state"));
    if (handOn && !cookies[flowCookie(key)] && request.hostname === appHost) {
      const query = request.url.indexOf("?");
      return reply.redirect(`${authBase}${SIGNIN_OIDC_PATH}/callback${query === -1 ? "" : request.url.slice(query)}`, 303);
    }
    const returnTo = safeReturnTo(decoded(cookies[returnCookie(key)] ?? ""));
    // A refused confirmation leads back to the page that asked for it (a payment, say).
    offerOnward(request, returnTo, "Go back to where you were");
    const current = await ctx.session(request);
    // The flow is used up whatever happens next; the cookies go with it.
    reply.header("set-cookie", [cookie(flowCookie(key), "", 0), cookie(returnCookie(key), "", 0)]);
    const res = await ctx.grants.completeProviderSignIn(
      {
        callbackUrl: ctx.urls.appUrl.replace(/\/+$/, "") + request.url,
        flowSecret: cookies[flowCookie(key)] ?? "",
        sessionToken: current?.token ?? "",
        replacesSessionToken: ctx.sessionToken(request) ?? "",
      },
      ctx.rpc(request),
    );
    if (res.sessionToken) ctx.setSession(reply, res);
    return reply.redirect(returnTo, 303);
  });
};
