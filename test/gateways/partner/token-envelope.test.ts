import { expect } from "chai";
import { createRouterTransport } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { PartnersService } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { buildGateway } from "../../../gateways/app.js";
import { createCoreClients } from "../../../gateways/core-clients.js";
import { fail } from "../../../core/errors.js";
import { createCapturedLogger } from "../../support/logs.js";

const EXPECTED: Partial<Record<Reason, [number, string]>> = {
  [Reason.INVALID_REQUEST]: [400, "invalid_request"],
  [Reason.INVALID_CLIENT]: [401, "invalid_client"],
  [Reason.CLIENT_INACTIVE]: [403, "invalid_client"],
  [Reason.UNSUPPORTED_GRANT_TYPE]: [400, "unsupported_grant_type"],
  [Reason.UNAUTHORIZED_CLIENT]: [400, "unauthorized_client"],
  [Reason.INVALID_SCOPE]: [400, "invalid_scope"],
  [Reason.RATE_LIMITED]: [429, "rate_limited"],
  [Reason.SIGNING_UNAVAILABLE]: [503, "temporarily_unavailable"],
  [Reason.OVERLOADED]: [503, "temporarily_unavailable"],
  [Reason.UNAVAILABLE]: [503, "temporarily_unavailable"],
  [Reason.AUDIT_UNAVAILABLE]: [503, "temporarily_unavailable"],
  // The flat envelope is shared with the agent OAuth endpoints (RFC 6749 5.2, RFC 7591 3.2.2).
  [Reason.INVALID_GRANT]: [400, "invalid_grant"],
  [Reason.INVALID_CLIENT_METADATA]: [400, "invalid_client_metadata"],
  [Reason.INVALID_REDIRECT_URI]: [400, "invalid_redirect_uri"],
  [Reason.ACCESS_DENIED]: [403, "access_denied"],
  [Reason.INVALID_TARGET]: [400, "invalid_target"],
  [Reason.INVALID_TOKEN]: [401, "invalid_token"],
  [Reason.INSUFFICIENT_SCOPE]: [400, "invalid_scope"],
  [Reason.PARTNER_INACTIVE]: [403, "invalid_client"],
  [Reason.AUTH_UNAVAILABLE]: [503, "temporarily_unavailable"],
  [Reason.PROVIDER_UNAVAILABLE]: [503, "temporarily_unavailable"],
};

/** Table-driven: every Reason core can raise renders inside the OAuth error envelope. */
describe("partner token endpoint: the OAuth error envelope for every Reason", () => {
  let app: FastifyInstance;
  let url: string;
  let current: Reason = Reason.UNSPECIFIED;
  const SECRET_MESSAGE = "internal detail that must not leak";

  before(async () => {
    // Core is a stub here on purpose: only the envelope is under test.
    const transport = createRouterTransport(({ rpc }) => {
      rpc(PartnersService.method.issueToken, () =>
        fail(current, current in EXPECTED ? "client-facing message" : SECRET_MESSAGE, {
          retryAfterSeconds: current === Reason.RATE_LIMITED || current === Reason.OVERLOADED || current === Reason.UNAVAILABLE ? 60 : 0,
        }),
      );
    });
    app = await buildGateway({ clients: createCoreClients(transport), logger: createCapturedLogger().logger });
    await app.listen({ port: 0, host: "127.0.0.1" });
    url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  });
  after(() => app.close());

  const reasons = Object.values(Reason).filter((v): v is Reason => typeof v === "number");
  for (const reason of reasons) {
    it(`renders ${Reason[reason]}`, async () => {
      current = reason;
      const res = await fetch(`${url}/api/partner/oauth/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "grant_type=client_credentials&client_id=a&client_secret=b",
      });
      const text = await res.text();
      const body = JSON.parse(text) as { error: string; error_description?: string };
      const [status, error] = EXPECTED[reason] ?? [500, "server_error"];
      expect(res.status).to.equal(status);
      expect(body.error).to.equal(error);
      expect(res.headers.get("cache-control")).to.equal("no-store");
      expect(res.headers.get("pragma")).to.equal("no-cache");
      expect(res.headers.get("www-authenticate") !== null).to.equal(status === 401);
      // Core names a wait for rate limits, shed load and database outages (503 with Retry-After).
      expect(res.headers.get("retry-after") !== null).to.equal(status === 429 || reason === Reason.OVERLOADED || reason === Reason.UNAVAILABLE);
      if (status >= 500) expect(text).to.not.include(SECRET_MESSAGE);
    });
  }
});
