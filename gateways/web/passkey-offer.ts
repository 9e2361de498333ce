import type { FastifyRequest } from "fastify";
import type { WebContext } from "./context.js";
import { html, type Html } from "./views/html.js";
import { STEP_UP_PASSKEY_PATH } from "./paths.js";

/** The step-up page's "Use a passkey" button: only when the deployment offers passkeys and the person has one. */
export async function passkeyStepUpOffer(ctx: WebContext, request: FastifyRequest, sessionToken: string, returnTo: string): Promise<Html> {
  if (!ctx.signinMethods.includes("passkey")) return html``;
  const { passkeys } = await ctx.grants.listPasskeys({ sessionToken }, ctx.rpc(request));
  if (passkeys.length === 0) return html``;
  return html`<p class="card"><a class="button" href="${STEP_UP_PASSKEY_PATH}?return_to=${encodeURIComponent(returnTo)}">Use a passkey</a></p>`;
}
