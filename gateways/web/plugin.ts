import type { FastifyInstance } from "fastify";
import type { Client } from "@connectrpc/connect";
import type { GrantsService } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import type { BudgetsService } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import type { PublicUrls } from "../shared/public-urls.js";
import { BAD_ADDRESS, createWebContext, FORM_TYPE, PageError, setPageHeaders, wellFormedQuery } from "./context.js";
import { pageErrorHandler } from "./page-errors.js";
import { refuseEncodedBodies } from "../shared/content-encoding.js";
import { signInRoutes } from "./routes/signin.js";
import { signOutRoutes } from "./routes/signout.js";
import { providerSignInRoutes } from "./routes/provider-signin.js";
import { authorizeRoutes } from "./routes/authorize.js";
import { dashboardRoutes } from "./routes/dashboard.js";
import { approvalRoutes } from "./routes/approvals.js";
import { passkeyRoutes } from "./routes/passkeys.js";
import { utf8Parser } from "../shared/utf8.js";

export interface WebGatewayOptions {
  grants: Client<typeof GrantsService>;
  budgets: Client<typeof BudgetsService>;
  urls: PublicUrls;
  signinMethods?: readonly string[];
}

const FORM_LIMIT = 16 * 1024;

/**
 * Server-rendered pages (sign-in, step-up, consent, dashboard): no scripts, a CSRF token on every
 * form, every value escaped. This file only assembles, so its hooks and handlers reach every route.
 */
export async function webGateway(app: FastifyInstance, options: WebGatewayOptions) {
  app.addHook(
    "onRequest",
    refuseEncodedBodies((message) => new PageError(415, "This form could not be read", `${message}.`)),
  );
  app.addContentTypeParser(FORM_TYPE, { parseAs: "buffer", bodyLimit: FORM_LIMIT }, utf8Parser);
  app.addHook("onSend", async (_request, reply) => {
    setPageHeaders(reply);
  });
  // A query that is not percent-encoded UTF-8 cannot be read reliably (fastify's parser and
  // URLSearchParams both guess), and no text we keep may hold a NUL: either is a 400 page.
  app.addHook("onRequest", async (request) => {
    if (!wellFormedQuery(request.url) || /%00/.test(request.url)) throw new PageError(400, BAD_ADDRESS.title, BAD_ADDRESS.detail);
  });

  const ctx = createWebContext(options);
  app.setErrorHandler(pageErrorHandler(ctx));

  await app.register(signInRoutes, { ctx });
  await app.register(signOutRoutes, { ctx });
  await app.register(providerSignInRoutes, { ctx });
  await app.register(authorizeRoutes, { ctx });
  await app.register(dashboardRoutes, { ctx });
  await app.register(approvalRoutes, { ctx });
  await app.register(passkeyRoutes, { ctx });
}
