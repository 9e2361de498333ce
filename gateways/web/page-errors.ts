import type { FastifyReply, FastifyRequest } from "fastify";
import { ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { noteRefusal } from "../request-log.js";
import { html } from "./views/html.js";
import { PageError, type WebContext } from "./context.js";
import { AGENTS_PATH, SIGNIN_PATH } from "./paths.js";

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
  [Reason.UNAUTHORIZED_CLIENT]: GENERIC,
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
  [Reason.INVALID_CURSOR]: { status: 400, title: "This page link cannot be used" },
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
  [Reason.TOKEN_UNSUPPORTED]: { status: 400, title: "Something is wrong with this request" },
} satisfies Record<Reason, { status: number; title: string } | undefined>;

/** A way on a route offers for its own refusals (not outages), instead of the agents list. */
const onwardOffers = new WeakMap<FastifyRequest, { href: string; label: string }>();

/** Offers `href` (a same-site path) as the way on should this request be refused. */
export function offerOnward(request: FastifyRequest, href: string, label: string): void {
  onwardOffers.set(request, { href, label });
}

/**
 * The web surface's error handler: a PageError is its own page, core's refusals map through
 * the table above, an ended session goes back to sign-in, anything else is a 500 page.
 */
export function pageErrorHandler(ctx: WebContext) {
  // Where a person goes next: their agents with a session cookie, else the sign-in page (no core call, which may be what failed).
  const onward = (request: FastifyRequest, status: number) => {
    const offer = status < 500 ? onwardOffers.get(request) : undefined;
    if (offer) return html`<p><a href="${offer.href}">${offer.label}</a></p>`;
    return ctx.sessionToken(request) ? html`<p><a href="${AGENTS_PATH}">Go to your agents</a></p>` : html`<p><a href="${SIGNIN_PATH}">Sign in</a></p>`;
  };
  return (err: unknown, request: FastifyRequest, reply: FastifyReply) => {
    if (err instanceof PageError)
      return ctx.send(reply, err.status, err.title, html`<div class="card error"><p>${err.detail}</p>${onward(request, err.status)}</div>`);
    const status = (err as { statusCode?: number }).statusCode;
    if (!(err instanceof ConnectError) && status === 413) {
      return ctx.send(
        reply,
        413,
        "This form is too large",
        html`<div class="card error"><p>No form here is that long. Go back and try again.</p>${onward(request, 413)}</div>`,
      );
    }
    if (!(err instanceof ConnectError) && status !== undefined && status >= 400 && status < 500) {
      return ctx.send(reply, 400, "Something is wrong with this request", html`<div class="card error"><p>The request could not be read.</p></div>`);
    }
    const reason = noteRefusal(request, err);
    if (reason === Reason.INVALID_TOKEN) {
      ctx.clearSession(reply);
      return ctx.signInRedirect(reply, request.method === "GET" ? request.url : AGENTS_PATH);
    }
    const row: { status: number; title: string } | undefined = reason !== undefined ? pageTable[reason] : undefined;
    if (!row) {
      request.log.error({ err }, "page failure");
      return ctx.send(reply, 500, "Something went wrong", html`<div class="card error"><p>Please try again. Reference: <code>${request.id}</code></p></div>`);
    }
    const message = err instanceof ConnectError && row.status < 500 ? err.rawMessage : "Please try again in a moment.";
    const retryAfter = err instanceof ConnectError ? err.findDetails(ErrorDetailSchema)[0]?.retryAfterSeconds : undefined;
    if ((row.status === 503 || row.status === 429) && retryAfter) reply.header("retry-after", String(retryAfter));
    return ctx.send(reply, row.status, row.title, html`<div class="card error"><p>${message}</p>${onward(request, row.status)}</div>`);
  };
}
