import type { FastifyPluginAsync, FastifyReply, FastifyRequest } from "fastify";
import { ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import type { CheckAuthorizationResponse } from "../../../gen/vaultgate/grants/v1/grants_pb.js";
import { noteRefusal } from "../../request-log.js";
import { oauthErrorFrom } from "../../shared/oauth-error.js";
import { AGENT_SCOPE_WORDS } from "../../shared/public-urls.js";
import { BAD_ADDRESS, PageError, type WebContext } from "../context.js";
import { parseForm } from "../../shared/form.js";
import { isolated } from "../../../lib/text.js";
import { AUTHORIZE_DECISION_PATH, AUTHORIZE_PATH, stepUpPath } from "../paths.js";
import { html } from "../views/html.js";

/** The authorization request's parameters; `resource` may repeat (RFC 8707). The last three are read to be refused. */
const PARAMS = [
  "response_type",
  "client_id",
  "redirect_uri",
  "code_challenge",
  "code_challenge_method",
  "scope",
  "resource",
  "state",
  "response_mode",
  "request",
  "request_uri",
] as const;

/**
 * What is wrong with the request's own form, refused once the client and redirect URI are
 * verified and before its scope or PKCE: a client must never get an answer in another
 * form than it asked for. Request objects get OpenID Connect Core 6's codes.
 */
function formError(p: AuthorizeParams): Record<string, string> | undefined {
  const refusal = (error: string, description: string) => ({ error, error_description: description });
  if (p.duplicates.length > 0) return refusal("invalid_request", `repeated parameter: ${p.duplicates[0]}`);
  if (p.values.has("request")) return refusal("request_not_supported", "request objects are not supported: send the parameters in the query");
  if (p.values.has("request_uri")) return refusal("request_uri_not_supported", "request_uri is not supported: send the parameters in the query");
  const responseType = p.values.get("response_type");
  if (responseType === undefined) return refusal("invalid_request", "response_type is required");
  if (responseType !== "code") return refusal("unsupported_response_type", "response_type must be code");
  const mode = p.values.get("response_mode");
  if (mode !== undefined && mode !== "query") return refusal("invalid_request", "response_mode must be query (the only mode supported)");
  return undefined;
}

interface AuthorizeParams {
  values: Map<string, string>;
  resources: string[];
  duplicates: string[];
}

/** Reads the parameters from a query string or form body; an empty one counts as omitted (RFC 6749 3.1). */
function readParams(encoded: string): AuthorizeParams {
  const parsed = parseForm(encoded, { repeatable: ["resource"], omitEmpty: true });
  // The page plugin refused a query that is not percent-encoded UTF-8 or holds NUL, and readForm a bad body.
  if (!parsed.ok) throw new PageError(400, BAD_ADDRESS.title, BAD_ADDRESS.detail);
  const values = new Map<string, string>();
  for (const name of PARAMS) if (parsed.params.has(name)) values.set(name, parsed.params.get(name)!);
  const duplicates = PARAMS.filter((name) => parsed.duplicates.includes(name));
  return { values, resources: parsed.lists.get("resource") ?? [], duplicates };
}

/** The URI core verified: the only place an answer is ever sent (never the request's own). */
function answerUri(verified: string): string {
  if (!verified) throw new Error("core verified the client but named no redirect URI");
  return verified;
}

function toQuery(p: AuthorizeParams): string {
  const sp = new URLSearchParams();
  for (const name of PARAMS) {
    if (name === "resource") for (const r of p.resources) sp.append("resource", r);
    else if (p.values.has(name)) sp.set(name, p.values.get(name)!);
  }
  return sp.toString();
}

/** GET /oauth2/authorize and the consent decision. */
export const authorizeRoutes: FastifyPluginAsync<{ ctx: WebContext }> = async (app, { ctx }) => {
  const coreRequest = (p: AuthorizeParams, sessionToken = "") => ({
    clientId: p.values.get("client_id") ?? "",
    redirectUri: p.values.get("redirect_uri") ?? "",
    scope: p.values.get("scope") ?? "",
    resources: p.resources,
    codeChallenge: p.values.get("code_challenge") ?? "",
    codeChallengeMethod: p.values.get("code_challenge_method") ?? "",
    sessionToken,
  });

  /** RFC 6749 4.1.2 with RFC 9207's iss. */
  function redirectBack(reply: FastifyReply, p: AuthorizeParams, uri: string, params: Record<string, string>) {
    const added = new URLSearchParams(params);
    const state = p.values.get("state");
    if (state !== undefined) added.set("state", state);
    added.set("iss", ctx.urls.issuer);
    // RFC 6749 3.1.2: the URI's own query is kept as written (a form encoder would rewrite it).
    // Core verified it (or chose the only one registered): RFC 3986 characters only, or a loopback one as the parser prints it.
    const joint = !uri.includes("?") ? "?" : /[?&]$/.test(uri) ? "" : "&";
    return reply.redirect(`${uri}${joint}${added}`, 303);
  }

  /**
   * RFC 6749 4.1.2.1: only a refusal core made after verifying the client and its
   * redirect URI goes back to that URI. Anything else (the pair not verified, core
   * overloaded or unreachable before it could check, a bug) is a page here.
   */
  function refuse(reply: FastifyReply, p: AuthorizeParams, err: unknown) {
    const reason = noteRefusal(reply.request, err);
    const detail = err instanceof ConnectError ? err.findDetails(ErrorDetailSchema)[0] : undefined;
    // A session that ended mid-flow goes back to sign-in (the page error handler), not to the client.
    if (!detail?.redirectUriVerified || reason === Reason.INVALID_TOKEN) throw err;
    const e = oauthErrorFrom(err);
    return redirectBack(
      reply,
      p,
      answerUri(detail.redirectUri),
      formError(p) ?? { error: e.error, ...(e.description ? { error_description: e.description } : {}) },
    );
  }

  /** Validates in the order the protocol sets; returns the check when the flow may continue. */
  async function check(request: FastifyRequest, reply: FastifyReply, p: AuthorizeParams, sessionToken: string) {
    if (p.duplicates.includes("client_id") || p.duplicates.includes("redirect_uri")) {
      throw new PageError(400, "Something is wrong with this request", "A parameter was repeated, so the application cannot be identified.");
    }
    let checked: CheckAuthorizationResponse;
    try {
      checked = await ctx.grants.checkAuthorization(coreRequest(p, sessionToken), ctx.rpc(request));
    } catch (err) {
      return { reply: refuse(reply, p, err) };
    }
    const refused = formError(p);
    if (refused) return { reply: redirectBack(reply, p, answerUri(checked.redirectUri), refused) };
    return { checked };
  }

  app.get(AUTHORIZE_PATH, async (request, reply) => {
    const q = request.url.indexOf("?");
    const p = readParams(q === -1 ? "" : request.url.slice(q + 1));
    const current = await ctx.session(request);
    const result = await check(request, reply, p, current?.token ?? "");
    if (!result.checked) return result.reply;
    const here = `${AUTHORIZE_PATH}?${toQuery(p)}`;
    if (!current) return ctx.signInRedirect(reply, here);
    const c = result.checked;
    if (c.stepUpRequired && !c.stepUpFresh) return reply.redirect(stepUpPath(here), 303);
    if (c.vaults.length === 0) throw new PageError(400, "No vault to connect", "Your account has no vault this application could use.");

    const csrf = ctx.csrfToken(request, reply);
    const client = c.client!;
    const redirectHost = new URL(answerUri(c.redirectUri)).host;
    const hidden = PARAMS.flatMap((name) =>
      name === "resource"
        ? p.resources.map((r) => html`<input type="hidden" name="resource" value="${r}">`)
        : p.values.has(name)
          ? [html`<input type="hidden" name="${name}" value="${p.values.get(name)}">`]
          : [],
    );
    const vaultChoice = c.vaultId
      ? html`<p><strong>Vault:</strong> ${c.vaults[0]!.label}<br><code class="muted">${c.vaults[0]!.urn}</code></p><input type="hidden" name="vault_id" value="${c.vaultId}">`
      : html`<fieldset><legend><strong>Which vault may it use?</strong></legend>${c.vaults.map(
          (v, i) =>
            html`<label><input type="radio" name="vault_id" value="${v.vaultId}" ${i === 0 ? html`checked` : ""}> ${v.label} <code class="muted">${v.urn}</code></label>`,
        )}</fieldset>`;
    return ctx.send(
      reply,
      200,
      `Allow ${isolated(client.clientName)}?`,
      html`<form class="card" method="post" action="${AUTHORIZE_DECISION_PATH}">
        <p><strong>${isolated(client.clientName)}</strong> <span class="muted">(<code>${client.clientId}</code>)</span> wants to act for you. It will be able to:</p>
        <ul class="scopes">${c.scopes.map((s) => html`<li>${AGENT_SCOPE_WORDS[s] ?? s} <span class="muted">(<code>${s}</code>)</span></li>`)}</ul>
        ${vaultChoice}
        ${c.stepUpFresh ? html`<p class="muted">You confirmed it's you a moment ago; this approval is marked as step-up verified.</p>` : ""}
        <p class="muted">After you decide you will return to <strong>${redirectHost}</strong>. You can revoke access at any time from your dashboard.</p>
        <input type="hidden" name="csrf" value="${csrf}">${hidden}
        <button type="submit" name="decision" value="approve">Allow</button>
        <button type="submit" name="decision" value="deny" class="secondary">Deny</button>
      </form>`,
      { email: current.session.email, csrf },
    );
  });

  app.post(AUTHORIZE_DECISION_PATH, async (request, reply) => {
    const form = ctx.readForm(request, ["resource"]);
    ctx.checkCsrf(request, form.params);
    const p = readParams(request.body as string);
    const current = await ctx.session(request);
    const result = await check(request, reply, p, current?.token ?? "");
    if (!result.checked) return result.reply;
    if (!current) return ctx.signInRedirect(reply, `${AUTHORIZE_PATH}?${toQuery(p)}`);
    if (form.params.get("decision") !== "approve") {
      return redirectBack(reply, p, answerUri(result.checked.redirectUri), { error: "access_denied", error_description: "the user denied the request" });
    }
    try {
      const res = await ctx.grants.approveAuthorization(
        { request: coreRequest(p), sessionToken: current.token, vaultId: form.params.get("vault_id") ?? "" },
        ctx.rpc(request),
      );
      return redirectBack(reply, p, answerUri(result.checked.redirectUri), { code: res.code });
    } catch (err) {
      if (noteRefusal(request, err) === Reason.ACCESS_DENIED) return reply.redirect(stepUpPath(`${AUTHORIZE_PATH}?${toQuery(p)}`), 303);
      return refuse(reply, p, err);
    }
  });
};
