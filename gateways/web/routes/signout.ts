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

/**
 * Sign-out. With AUTH_URL on another host than APP_URL each host has its own session cookie:
 * signing out on one hands the browser to the other with core's sign-out handoff, which ends
 * the session there when it is the same person's, and comes back to sign-in (docs/deploying.md).
 */
export const signOutRoutes: FastifyPluginAsync<{ ctx: WebContext }> = async (app, { ctx }) => {
  const dash = { host: new URL(ctx.urls.appUrl).hostname, base: ctx.urls.appUrl.replace(/\/+$/, "") };
  const auth = { host: new URL(ctx.urls.authUrl).hostname, base: ctx.urls.authUrl.replace(/\/+$/, "") };
  /** The other web host's base URL, from configuration only, when the request came to one of two hosts. */
  function otherHost(request: FastifyRequest): string | undefined {
    if (dash.host === auth.host) return undefined;
    if (request.hostname === dash.host) return auth.base;
    if (request.hostname === auth.host) return dash.base;
    return undefined;
  }

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
    const other = otherHost(request);
    if (other && handoff) return reply.redirect(`${other}${SIGNOUT_CONTINUE_PATH}?handoff=${encodeURIComponent(handoff)}`, 303);
    return reply.redirect(SIGNIN_PATH, 303);
  });

  // A GET, as the redirect from the other host arrives; no HEAD twin, so a prefetch ends nothing.
  app.get(SIGNOUT_CONTINUE_PATH, STARTS_A_CEREMONY, async (request, reply) => {
    const other = otherHost(request);
    const given = (request.query as Record<string, unknown>).handoff;
    const handoff = typeof given === "string" && given.length <= HANDOFF_MAX_LENGTH && HANDOFF_SHAPE.test(given) ? given : "";
    const token = ctx.sessionToken(request);
    if (other && handoff && token) {
      try {
        await ctx.grants.continueSignOut({ sessionToken: token, signoutHandoff: handoff }, ctx.rpc(request));
        ctx.clearSession(reply);
      } catch (err) {
        // Another person's session, or a handoff that is not a live one: nothing ends here.
        const reason = noteRefusal(request, err);
        if (reason !== Reason.INVALID_GRANT && reason !== Reason.ACCESS_DENIED && reason !== Reason.INVALID_TOKEN) {
          return signOutFailed(request, reply, err);
        }
      }
    }
    // Back to sign-in where the person signed out: an address from configuration, never the request.
    return reply.redirect(other ? `${other}${SIGNIN_PATH}` : SIGNIN_PATH, 303);
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
