import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { noteRefusal } from "../../request-log.js";
import { ceremoniesToEnd, readCookies, safeReturnTo, PageError, STARTS_A_CEREMONY, type WebContext } from "../context.js";
import { sha256Base64url } from "../../../lib/crypto.js";
import { UUID } from "../../../lib/uuid.js";
import { PASSKEYS_PATH, SIGNIN_PASSKEY_PATH, signInPath, STEP_UP_PASSKEY_PATH, stepUpPath } from "../paths.js";
import { html } from "../views/html.js";
import { ceremonyForm, passkeyList, PASSKEYS_NOT_ENABLED, PASSKEYS_SCRIPT_PATH } from "../views/passkeys.js";
import { PASSKEYS_SCRIPT } from "../views/passkeys-script.js";

/** The browser's secret for one passkey ceremony; core completes it only with this. */
const FLOW_COOKIE = "vg_passkey";
const FLOW_SECONDS = 300;

type Query = Record<string, string | string[] | undefined>;
const q = (request: FastifyRequest, name: string) => {
  const v = (request.query as Query)[name];
  return typeof v === "string" ? v : undefined;
};

/**
 * Passkeys on the web: the dashboard's list, add (after a fresh step-up) and remove; a
 * passkey as step-up (/stepup/passkey) and as sign-in (/signin/passkey). WebAuthn needs
 * the browser's JavaScript, so these pages alone may load our one script.
 */
export const passkeyRoutes: FastifyPluginAsync<{ ctx: WebContext }> = async (app, { ctx }) => {
  const secure = ctx.urls.appUrl.startsWith("https:");
  const offered = ctx.signinMethods.includes("passkey");
  // Refused before sign-in and step-up: a person must not confirm it is them for a page that cannot work.
  const refuseAddIfNotOffered = () => {
    if (!offered) throw new PageError(404, "Not found", PASSKEYS_NOT_ENABLED);
  };
  // Over https a __Host- name, like the session's: a sibling subdomain could otherwise plant its own
  // flow's secret on a narrower path, sent first, and spoil the person's ceremony.
  // Each ceremony's cookie is named by a digest of its secret, which its form posts back: two tabs keep theirs.
  const flowName = (key: string) => `${secure ? "__Host-" : ""}${FLOW_COOKIE}.${key}`;
  const flowCookie = (key: string, value: string, maxAge: number) =>
    `${flowName(key)}=${value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${secure ? "; Secure" : ""}`;
  /** Sets a new ceremony's cookie; answers the key its form posts back. */
  const startFlow = (request: FastifyRequest, reply: FastifyReply, flowSecret: string) => {
    const key = sha256Base64url(flowSecret).slice(0, 16);
    const ended = ceremoniesToEnd(request, flowName("")).map((k) => flowCookie(k, "", 0));
    reply.header("set-cookie", [...ended, flowCookie(key, flowSecret, FLOW_SECONDS)]);
    return key;
  };
  const takeFlow = (request: FastifyRequest, reply: FastifyReply, form: Map<string, string>) => {
    const key = form.get("flow") ?? "";
    if (!/^[A-Za-z0-9_-]{16}$/.test(key)) return "";
    reply.header("set-cookie", [flowCookie(key, "", 0)]);
    return readCookies(request)[flowName(key)] ?? "";
  };
  // Registered after the plugin-wide page headers, so this replaces their script-less policy here.
  app.addHook("onSend", async (_request, reply) => {
    reply.header(
      "content-security-policy",
      "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    );
  });
  const answer = (form: Map<string, string>) => {
    const response = form.get("response") ?? "";
    if (!response)
      throw new PageError(
        400,
        "Your browser did not answer",
        "Passkeys need JavaScript in this browser. Turn it on and start again, or use another way to confirm it is you.",
      );
    return response;
  };

  app.get(PASSKEYS_SCRIPT_PATH, async (_request, reply) =>
    reply.type("text/javascript; charset=utf-8").header("cache-control", "public, max-age=300").send(PASSKEYS_SCRIPT),
  );

  app.get(PASSKEYS_PATH, async (request, reply) => {
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, PASSKEYS_PATH);
    const res = await ctx.grants.listPasskeys({ sessionToken: current.token }, ctx.rpc(request));
    const csrf = ctx.csrfToken(request, reply);
    const done = ctx.takeNotice(request, reply);
    const notice = done === "passkey-added" ? "Your passkey was added." : done === "passkey-removed" ? "The passkey was removed." : undefined;
    return ctx.send(reply, 200, "Passkeys", passkeyList(res.passkeys, csrf, { offered, notice }), { email: current.session.email, csrf });
  });

  app.get(`${PASSKEYS_PATH}/add`, STARTS_A_CEREMONY, async (request, reply) => {
    refuseAddIfNotOffered();
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, `${PASSKEYS_PATH}/add`);
    if (!current.session.stepUpFresh) return reply.redirect(stepUpPath(`${PASSKEYS_PATH}/add`), 303);
    const res = await ctx.grants.startPasskeyRegistration({ sessionToken: current.token }, ctx.rpc(request)).catch((err: unknown) => {
      if (noteRefusal(request, err) === Reason.ACCESS_DENIED) return undefined;
      throw err;
    });
    if (!res) return reply.redirect(stepUpPath(`${PASSKEYS_PATH}/add`), 303);
    const flow = startFlow(request, reply, res.flowSecret);
    const csrf = ctx.csrfToken(request, reply);
    return ctx.send(
      reply,
      200,
      "Add a passkey",
      ceremonyForm({
        kind: "create",
        action: `${PASSKEYS_PATH}/add`,
        optionsJson: res.optionsJson,
        csrf,
        flow,
        button: "Create passkey",
        intro: "Your device will ask for your fingerprint, face or PIN.",
        askName: true,
      }),
      { email: current.session.email, csrf },
    );
  });

  app.post(`${PASSKEYS_PATH}/add`, async (request, reply) => {
    refuseAddIfNotOffered();
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, PASSKEYS_PATH);
    const flowSecret = takeFlow(request, reply, form.params);
    try {
      await ctx.grants.finishPasskeyRegistration(
        { sessionToken: current.token, flowSecret, responseJson: answer(form.params), name: form.params.get("name") ?? "" },
        ctx.rpc(request),
      );
    } catch (err) {
      // The step-up went stale during the ceremony: confirm again, then start a new one.
      if (noteRefusal(request, err) === Reason.ACCESS_DENIED) {
        const now = await ctx.session(request);
        if (now && !now.session.stepUpFresh) return reply.redirect(stepUpPath(`${PASSKEYS_PATH}/add`), 303);
      }
      throw err;
    }
    ctx.notify(reply, "passkey-added");
    return reply.redirect(PASSKEYS_PATH, 303);
  });

  app.post<{ Params: { id: string } }>(`${PASSKEYS_PATH}/:id/remove`, async (request, reply) => {
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, PASSKEYS_PATH);
    if (!UUID.test(request.params.id)) throw new PageError(404, "Not found", "There is no such passkey.");
    if (!current.session.stepUpFresh) return reply.redirect(stepUpPath(PASSKEYS_PATH), 303);
    try {
      await ctx.grants.removePasskey({ sessionToken: current.token, passkeyId: request.params.id }, ctx.rpc(request));
    } catch (err) {
      // The step-up went stale between our check and core's: through the step-up page again.
      if (noteRefusal(request, err) === Reason.ACCESS_DENIED) return reply.redirect(stepUpPath(PASSKEYS_PATH), 303);
      throw err;
    }
    ctx.notify(reply, "passkey-removed");
    return reply.redirect(PASSKEYS_PATH, 303);
  });

  app.get(STEP_UP_PASSKEY_PATH, STARTS_A_CEREMONY, async (request, reply) => {
    const returnTo = safeReturnTo(q(request, "return_to"));
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, stepUpPath(returnTo));
    const res = await ctx.grants.startPasskeyAssertion({ sessionToken: current.token }, ctx.rpc(request));
    const flow = startFlow(request, reply, res.flowSecret);
    const csrf = ctx.csrfToken(request, reply);
    return ctx.send(
      reply,
      200,
      "Confirm it's you",
      html`${ceremonyForm({ kind: "get", action: STEP_UP_PASSKEY_PATH, optionsJson: res.optionsJson, csrf, flow, returnTo, button: "Use my passkey", intro: "Confirm with your passkey: your device will ask for your fingerprint, face or PIN." })}
        <p><a href="${stepUpPath(returnTo)}">Confirm another way</a></p>`,
      { email: current.session.email, csrf },
    );
  });

  app.post(STEP_UP_PASSKEY_PATH, async (request, reply) => {
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const returnTo = safeReturnTo(form.params.get("return_to"));
    const current = await ctx.session(request);
    if (!current) return ctx.signInRedirect(reply, stepUpPath(returnTo));
    const flowSecret = takeFlow(request, reply, form.params);
    await ctx.grants.finishPasskeyAssertion({ sessionToken: current.token, flowSecret, responseJson: answer(form.params) }, ctx.rpc(request));
    return reply.redirect(returnTo, 303);
  });

  app.get(SIGNIN_PASSKEY_PATH, STARTS_A_CEREMONY, async (request, reply) => {
    if (!ctx.signinMethods.includes("passkey")) throw new PageError(404, "Not found", "Signing in with a passkey is not offered here.");
    const returnTo = safeReturnTo(q(request, "return_to"));
    const res = await ctx.grants.startPasskeyAssertion({}, ctx.rpc(request));
    const flow = startFlow(request, reply, res.flowSecret);
    const csrf = ctx.csrfToken(request, reply);
    return ctx.send(
      reply,
      200,
      "Sign in with a passkey",
      html`${ceremonyForm({ kind: "get", action: SIGNIN_PASSKEY_PATH, optionsJson: res.optionsJson, csrf, flow, returnTo, button: "Use my passkey", intro: "Your device will ask for your fingerprint, face or PIN." })}
        <p><a href="${signInPath(returnTo)}">Sign in another way</a></p>`,
    );
  });

  app.post(SIGNIN_PASSKEY_PATH, async (request, reply) => {
    if (!ctx.signinMethods.includes("passkey")) throw new PageError(404, "Not found", "Signing in with a passkey is not offered here.");
    const form = ctx.readForm(request);
    ctx.checkCsrf(request, form.params);
    const returnTo = safeReturnTo(form.params.get("return_to"));
    const flowSecret = takeFlow(request, reply, form.params);
    const res = await ctx.grants.finishPasskeyAssertion(
      { flowSecret, responseJson: answer(form.params), replacesSessionToken: ctx.sessionToken(request) ?? "" },
      ctx.rpc(request),
    );
    ctx.setSession(reply, res);
    return reply.redirect(returnTo, 303);
  });
};
