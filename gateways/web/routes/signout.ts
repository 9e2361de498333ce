import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import { Code, ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { noteRefusal } from "../../request-log.js";
import { STARTS_A_CEREMONY, type WebContext } from "../context.js";
import { SIGNIN_PATH, SIGNOUT_CONTINUE_PATH, SIGNOUT_PATH } from "../paths.js";
import { html } from "../views/html.js";

/** A compact JWS as core signs them; anything else is not worth a call. */
const HANDOFF_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/;
const HANDOFF_MAX_LENGTH = 2048;

/** The configured addresses a sign-out may begin at, by the name its continue links carry. */
const STARTS = ["app", "auth", "base", "mcp", "issuer"] as const;
type Start = (typeof STARTS)[number];
const isStart = (v: unknown): v is Start => STARTS.includes(v as Start);

/**
 * Sign-out. Each host has its own session cookie: signing out on one hands the browser, with
 * core's sign-out handoff, to APP_URL's and AUTH_URL's hosts in turn, each ending the session
 * there when it is the same person's, and back to sign-in where it began (docs/deploying.md).
 */
export const signOutRoutes: FastifyPluginAsync<{ ctx: WebContext }> = async (app, { ctx }) => {
  const { appUrl, authUrl, baseUrl, mcpUrl, issuer } = ctx.urls;
  const bases: Record<Start, string> = { app: appUrl, auth: authUrl, base: baseUrl, mcp: mcpUrl, issuer };
  const base = (key: Start) => bases[key].replace(/\/+$/, "");
  const host = (key: Start) => new URL(bases[key]).hostname;
  // The dashboard's and the consent page's hosts serve pages by definition; another may not.
  const pageHosts: Start[] = host("auth") === host("app") ? ["app"] : ["app", "auth"];
  const startAt = (hostname: string) => STARTS.find((key) => host(key) === hostname);
  /** The page hosts a sign-out begun at `start` visits after its own, in order. */
  const chainFrom = (start: Start | undefined) => (start ? pageHosts.filter((key) => host(key) !== host(start)) : []);
  const continueAt = (to: Start, handoff: string, start: Start) => `${base(to)}${SIGNOUT_CONTINUE_PATH}?handoff=${encodeURIComponent(handoff)}&from=${start}`;

  app.post(SIGNOUT_PATH, async (request, reply) => {
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const token = ctx.sessionToken(request);
    let handoff = "";
    if (token) {
      try {
        handoff = (await ctx.grants.endSession({ sessionToken: token }, ctx.rpc(request))).signoutHandoff;
      } catch (err) {
        // A session that had already ended (or never was) has nothing left to end. Any other
        // failure keeps the cookie, so that trying again can still end the session.
        if (noteRefusal(request, err) !== Reason.INVALID_TOKEN) return signOutFailed(request, reply, err);
      }
    }
    ctx.clearSession(reply);
    const start = startAt(request.hostname);
    const next = handoff ? chainFrom(start)[0] : undefined;
    if (next && start) return reply.redirect(continueAt(next, handoff, start), 303);
    return reply.redirect(SIGNIN_PATH, 303);
  });

  // A GET, as the redirect from the other host arrives; no HEAD twin, so a prefetch ends nothing.
  app.get(SIGNOUT_CONTINUE_PATH, STARTS_A_CEREMONY, async (request, reply) => {
    const query = request.query as Record<string, unknown>;
    const given = query.handoff;
    let handoff = typeof given === "string" && given.length <= HANDOFF_MAX_LENGTH && HANDOFF_SHAPE.test(given) ? given : "";
    // The link names where the sign-out began; one without (an older gateway's) began on the other page host.
    const here = pageHosts.find((key) => host(key) === request.hostname);
    const start = isStart(query.from) ? query.from : here && pageHosts.find((key) => key !== here);
    const chain = chainFrom(start);
    const at = chain.findIndex((key) => host(key) === request.hostname);
    const token = ctx.sessionToken(request);
    if (at >= 0 && handoff && token) {
      try {
        await ctx.grants.continueSignOut({ sessionToken: token, signoutHandoff: handoff }, ctx.rpc(request));
        ctx.clearSession(reply);
      } catch (err) {
        // Another person's session, or a handoff that is not a live one: nothing ends here.
        const reason = noteRefusal(request, err);
        if (reason !== Reason.INVALID_GRANT && reason !== Reason.ACCESS_DENIED && reason !== Reason.INVALID_TOKEN) {
          return signOutFailed(request, reply, err);
        }
        if (reason === Reason.INVALID_GRANT) handoff = "";
      }
    }
    const next = at >= 0 && handoff ? chain[at + 1] : undefined;
    if (next && start) return reply.redirect(continueAt(next, handoff, start), 303);
    // Back to sign-in where the person signed out: an address from configuration, never the request.
    return reply.redirect(start ? `${base(start)}${SIGNIN_PATH}` : SIGNIN_PATH, 303);
  });

  /** The session may still be live on the server: say so instead of claiming success. */
  function signOutFailed(request: FastifyRequest, reply: FastifyReply, err: unknown) {
    const connectErr = ConnectError.from(err);
    const detail = connectErr.findDetails(ErrorDetailSchema)[0];
    const unavailable = detail
      ? detail.reason === Reason.UNAVAILABLE || detail.reason === Reason.OVERLOADED
      : connectErr.code === Code.Unavailable || connectErr.code === Code.DeadlineExceeded;
    if (!unavailable) request.log.error({ err }, "sign-out failure");
    if (unavailable && detail?.retryAfterSeconds) reply.header("retry-after", String(detail.retryAfterSeconds));
    return ctx.send(
      reply,
      unavailable ? 503 : 500,
      "Sign-out did not complete",
      html`<div class="card error"><p>We could not end your session on the server just now, so you are still signed in. Try again in a moment.</p><form method="post" action="${SIGNOUT_PATH}"><input type="hidden" name="csrf" value="${ctx.csrfToken(request, reply)}"><button type="submit">Sign out again</button></form><p>Reference: <code>${request.id}</code></p></div>`,
    );
  }
};
