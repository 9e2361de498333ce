import type { HandlerContext } from "@connectrpc/connect";
import type { CompleteProviderSignInRequest, StartProviderSignInRequest } from "../../gen/vaultgate/grants/v1/signin_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { callFacts } from "../context.js";
import { fail } from "../errors.js";
import { limitFlowStart, type FlowStartLimit } from "./flow-starts.js";
import type { OidcSignin } from "./oidc.js";
import type { KnownBrowsers } from "./known-browsers.js";
import type { SessionVerifier } from "./sessions.js";

export interface ProviderSignInDeps {
  /** Undefined when the deployment offers no OpenID Connect provider. */
  oidc: OidcSignin | undefined;
  sessions: SessionVerifier;
  clock: () => Date;
  /** Completing a sign-in marks the browser as known (core/identity/known-browsers.ts). */
  browsers: KnownBrowsers;
  /** Starts are limited per session, and without one per client address (core/identity/flow-starts.ts). */
  flowStarts: FlowStartLimit;
}

function provider(deps: ProviderSignInDeps): OidcSignin {
  return deps.oidc ?? fail(Reason.NOT_FOUND, "signing in with an organisation's provider is not offered here");
}

/** GrantsService.StartProviderSignIn: a sign-in, or with a session a step-up, at the OpenID Connect provider. */
export async function startProviderSignIn(deps: ProviderSignInDeps, req: StartProviderSignInRequest, ctx: HandlerContext) {
  const oidc = provider(deps);
  const s = req.sessionToken ? await deps.sessions.verify(req.sessionToken) : undefined;
  const flow = await limitFlowStart(deps.flowStarts, ctx, s, (purpose, session) => oidc.start(purpose, session));
  return {
    authorizationUrl: flow.authorizationUrl,
    flowSecret: flow.binding,
    expiresIn: BigInt(Math.max(0, Math.floor((flow.expiresAt.getTime() - deps.clock().getTime()) / 1000))),
  };
}

/** GrantsService.CompleteProviderSignIn: the provider's redirect, checked; a session, or a step-up on the given one. */
export async function completeProviderSignIn(deps: ProviderSignInDeps, req: CompleteProviderSignInRequest, ctx: HandlerContext) {
  const oidc = provider(deps);
  if (req.callbackUrl.length > 4096)
    fail(
      Reason.INVALID_REQUEST,
      "the answer from your organisation's sign-in provider is too long (at most 4096 characters); start again from the sign-in page",
    );
  // Read as a URL only after the flow is taken, where a parse failure would pass for a provider outage (503).
  if (!URL.canParse(req.callbackUrl))
    fail(Reason.INVALID_REQUEST, "the answer from your organisation's sign-in provider is not an address; start again from the sign-in page");
  const s = req.sessionToken ? await deps.sessions.verify(req.sessionToken) : undefined;
  const done = await oidc.complete(
    {
      callbackUrl: req.callbackUrl,
      binding: req.flowSecret,
      session: s ? { sessionId: s.sessionId, userId: s.userId } : undefined,
      replaces: req.replacesSessionToken,
    },
    callFacts(ctx),
  );
  if (done.purpose === "sign_in") return { sessionToken: done.sessionToken, expiresIn: BigInt(done.expiresIn), browserToken: deps.browsers.issue(done.userId) };
  return { sessionToken: "", expiresIn: 0n };
}
