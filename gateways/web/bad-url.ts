import type { FastifyReply, FastifyRequest } from "fastify";
import { html, page } from "./views/html.js";
import { BAD_ADDRESS, setPageHeaders } from "./context.js";
import { AGENTS_PATH, AUTHORIZE_PATH, DASHBOARD_PATH, SIGNIN_PATH, SIGNOUT_PATH, STEP_UP_PATH } from "./paths.js";

/** Path prefixes served by the page surface (gateways/web): people, not programs, read these. */
const PAGE_PREFIXES = [SIGNIN_PATH, STEP_UP_PATH, SIGNOUT_PATH, DASHBOARD_PATH, AUTHORIZE_PATH];

/** True when `url` (raw, as received) belongs to a page route. */
export function isPagePath(url: string): boolean {
  return PAGE_PREFIXES.some((p) => url === p || url.startsWith(`${p}/`) || url.startsWith(`${p}?`));
}

/**
 * fastify's `frameworkErrors` for page paths: the router refuses bad percent-encoding before any
 * plugin or hook runs, so the page headers and request id are set here.
 */
export function sendBadUrlPage(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  reply.header("x-request-id", request.id);
  reply.header("x-content-type-options", "nosniff");
  setPageHeaders(reply);
  return reply
    .code(400)
    .type("text/html; charset=utf-8")
    .send(page(BAD_ADDRESS.title, html`<div class="card error"><p>${BAD_ADDRESS.detail}</p><p><a href="${AGENTS_PATH}">Go to your agents</a></p></div>`));
}

/** An unknown address under a page prefix: a page saying so, not fastify's JSON 404. */
export function sendPageNotFound(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  reply.header("x-request-id", request.id);
  reply.header("x-content-type-options", "nosniff");
  setPageHeaders(reply);
  return reply
    .code(404)
    .type("text/html; charset=utf-8")
    .send(
      page(
        "Page not found",
        html`<div class="card error"><p>There is no page at this address. Check the link, or start again from your dashboard.</p><p><a href="${AGENTS_PATH}">Go to your agents</a></p></div>`,
      ),
    );
}

/** A page address asked with a method it does not answer (a bookmarked form post, say); `Allow` is set. */
export function sendPageMethodNotAllowed(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  reply.header("x-request-id", request.id);
  setPageHeaders(reply);
  return reply
    .code(405)
    .type("text/html; charset=utf-8")
    .send(
      page(
        "This page cannot be opened this way",
        html`<div class="card error"><p>This address is not meant to be opened directly. Start again from your dashboard.</p><p><a href="${AGENTS_PATH}">Go to your agents</a></p></div>`,
      ),
    );
}

/** A page request from a foreign Origin or Host (DNS rebinding, cross-site form posts). */
export function sendForbiddenOriginPage(reply: FastifyReply): FastifyReply {
  setPageHeaders(reply);
  return reply
    .code(403)
    .type("text/html; charset=utf-8")
    .send(
      page(
        "Request refused",
        html`<div class="card error"><p>This request did not come from a Vaultgate page. Open Vaultgate at its own address and try again.</p></div>`,
      ),
    );
}
