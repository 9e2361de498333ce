import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { noteRefusal } from "../../request-log.js";
import { UUID } from "../../../lib/uuid.js";
import { safeReturnTo, type WebContext } from "../context.js";
import { SIGNIN_CODE_PATH, SIGNIN_OIDC_PATH, SIGNIN_PASSKEY_PATH, SIGNIN_PATH, signInPath, STEP_UP_CODE_PATH, STEP_UP_PATH, stepUpPath } from "../paths.js";
import { html } from "../views/html.js";
import { passkeyStepUpOffer } from "../passkey-offer.js";

type Query = Record<string, string | string[] | undefined>;
const q = (request: FastifyRequest, name: string) => {
  const v = (request.query as Query)[name];
  return typeof v === "string" ? v : undefined;
};

/** E-mail one-time-code sign-in and step-up (sign-out: ./signout.ts). */
export const signInRoutes: FastifyPluginAsync<{ ctx: WebContext }> = async (app, { ctx }) => {
  function emailForm(reply: FastifyReply, request: FastifyRequest, returnTo: string, status = 200, error?: string) {
    const csrf = ctx.csrfToken(request, reply);
    return ctx.send(
      reply,
      status,
      "Sign in",
      html`${error ? html`<div class="card error"><p>${error}</p></div>` : ""}
      ${ctx.signinMethods.includes("oidc") ? html`<p class="card"><a class="button" href="${SIGNIN_OIDC_PATH}?return_to=${encodeURIComponent(returnTo)}">Sign in with your organisation</a></p>` : ""}
      ${ctx.signinMethods.includes("passkey") ? html`<p class="card"><a class="button" href="${SIGNIN_PASSKEY_PATH}?return_to=${encodeURIComponent(returnTo)}">Sign in with a passkey</a></p>` : ""}
      ${
        ctx.signinMethods.includes("email")
          ? html`<form class="card" method="post" action="${SIGNIN_PATH}">
        <input type="hidden" name="csrf" value="${csrf}"><input type="hidden" name="return_to" value="${returnTo}">
        <label for="email">E-mail address</label>
        <input id="email" type="email" name="email" autocomplete="email" required>
        <p class="muted">We will e-mail you a one-time code.</p>
        <button type="submit">Send code</button>
      </form>`
          : ""
      }`,
    );
  }

  function codeForm(
    reply: FastifyReply,
    request: FastifyRequest,
    o: { action: string; challenge: string; returnTo: string; title: string; intro: string; status?: number; error?: string; email?: string },
  ) {
    const csrf = ctx.csrfToken(request, reply);
    return ctx.send(
      reply,
      o.status ?? 200,
      o.title,
      html`${o.error ? html`<div class="card error"><p>${o.error}</p></div>` : ""}
      <form class="card" method="post" action="${o.action}">
        <p>${o.intro}</p>
        <input type="hidden" name="csrf" value="${csrf}"><input type="hidden" name="return_to" value="${o.returnTo}">
        <input type="hidden" name="challenge" value="${o.challenge}">
        <label for="code">One-time code</label>
        <input id="code" type="text" name="code" inputmode="numeric" autocomplete="one-time-code" pattern="[0-9]{6}" maxlength="6" required>
        <button type="submit">Continue</button>
      </form>`,
      o.email ? { email: o.email, csrf } : undefined,
    );
  }

  app.get(SIGNIN_PATH, async (request, reply) => emailForm(reply, request, safeReturnTo(q(request, "return_to"))));

  app.post(SIGNIN_PATH, async (request, reply) => {
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const returnTo = safeReturnTo(form.params.get("return_to"));
    try {
      const res = await ctx.grants.startSignIn({ email: form.params.get("email") ?? "", browserToken: ctx.browserToken(request) }, ctx.rpc(request));
      return reply.redirect(`${SIGNIN_CODE_PATH}?challenge=${res.challengeId}&return_to=${encodeURIComponent(returnTo)}`, 303);
    } catch (err) {
      if (noteRefusal(request, err) === Reason.INVALID_REQUEST) return emailForm(reply, request, returnTo, 400, "Enter a valid e-mail address.");
      throw err;
    }
  });

  app.get(SIGNIN_CODE_PATH, async (request, reply) => {
    const challenge = q(request, "challenge") ?? "";
    const returnTo = safeReturnTo(q(request, "return_to"));
    if (!UUID.test(challenge)) return reply.redirect(signInPath(returnTo), 303);
    return codeForm(reply, request, {
      action: SIGNIN_CODE_PATH,
      challenge,
      returnTo,
      title: "Enter your code",
      intro: "If an account exists for that address, we sent it a 6-digit code. It expires in 10 minutes.",
    });
  });

  app.post(SIGNIN_CODE_PATH, async (request, reply) => {
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const returnTo = safeReturnTo(form.params.get("return_to"));
    const challenge = form.params.get("challenge") ?? "";
    try {
      const res = await ctx.grants.completeSignIn(
        {
          challengeId: challenge,
          code: form.params.get("code") ?? "",
          replacesSessionToken: ctx.sessionToken(request) ?? "",
          browserToken: ctx.browserToken(request),
        },
        ctx.rpc(request),
      );
      ctx.setSession(reply, res);
      return reply.redirect(returnTo, 303);
    } catch (err) {
      if (noteRefusal(request, err) !== Reason.INVALID_GRANT) throw err;
      return codeForm(reply, request, {
        action: SIGNIN_CODE_PATH,
        challenge: UUID.test(challenge) ? challenge : "",
        returnTo,
        title: "Enter your code",
        intro: "Enter the 6-digit code we e-mailed you.",
        status: 400,
        error: "That code is invalid or expired. Codes allow 5 attempts; you can request a new one from the sign-in page.",
      });
    }
  });

  app.get(STEP_UP_PATH, async (request, reply) => {
    const returnTo = safeReturnTo(q(request, "return_to"));
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, stepUpPath(returnTo));
    const csrf = ctx.csrfToken(request, reply);
    return ctx.send(
      reply,
      200,
      "Confirm it's you",
      html`<p>Approving payments or budgets needs a fresh confirmation.</p>
      ${ctx.signinMethods.includes("oidc") ? html`<p class="card"><a class="button" href="${SIGNIN_OIDC_PATH}?step_up=1&amp;return_to=${encodeURIComponent(returnTo)}">Confirm at your organisation</a></p>` : ""}
      ${
        ctx.signinMethods.includes("email")
          ? html`<form class="card" method="post" action="${STEP_UP_PATH}">
        <p>We will e-mail a code to <strong>${current.session.email}</strong>.</p>
        <input type="hidden" name="csrf" value="${csrf}"><input type="hidden" name="return_to" value="${returnTo}">
        <button type="submit">Send code</button>
      </form>`
          : ""
      }${await passkeyStepUpOffer(ctx, request, current.token, returnTo)}`,
      { email: current.session.email, csrf },
    );
  });

  app.post(STEP_UP_PATH, async (request, reply) => {
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const returnTo = safeReturnTo(form.params.get("return_to"));
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, stepUpPath(returnTo));
    const res = await ctx.grants.startSignIn({ sessionToken: current.token }, ctx.rpc(request));
    return reply.redirect(`${STEP_UP_CODE_PATH}?challenge=${res.challengeId}&return_to=${encodeURIComponent(returnTo)}`, 303);
  });

  app.get(STEP_UP_CODE_PATH, async (request, reply) => {
    const challenge = q(request, "challenge") ?? "";
    const returnTo = safeReturnTo(q(request, "return_to"));
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, stepUpPath(returnTo));
    if (!UUID.test(challenge)) return reply.redirect(stepUpPath(returnTo), 303);
    return codeForm(reply, request, {
      action: STEP_UP_CODE_PATH,
      challenge,
      returnTo,
      title: "Confirm it's you",
      intro: `Enter the 6-digit code we sent to ${current.session.email}.`,
      email: current.session.email,
    });
  });

  app.post(STEP_UP_CODE_PATH, async (request, reply) => {
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const returnTo = safeReturnTo(form.params.get("return_to"));
    const challenge = form.params.get("challenge") ?? "";
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, stepUpPath(returnTo));
    try {
      await ctx.grants.completeSignIn({ challengeId: challenge, code: form.params.get("code") ?? "", sessionToken: current.token }, ctx.rpc(request));
      return reply.redirect(returnTo, 303);
    } catch (err) {
      if (noteRefusal(request, err) !== Reason.INVALID_GRANT) throw err;
      return codeForm(reply, request, {
        action: STEP_UP_CODE_PATH,
        challenge: UUID.test(challenge) ? challenge : "",
        returnTo,
        title: "Confirm it's you",
        intro: "Enter the 6-digit code we e-mailed you.",
        status: 400,
        error: "That code is invalid or expired.",
        email: current.session.email,
      });
    }
  });
};
