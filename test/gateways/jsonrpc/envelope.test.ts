import { expect } from "chai";
import { createRouterTransport } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { GrantsService } from "../../../gen/vaultgate/grants/v1/grants_pb.js";
import { BudgetsService } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { buildGateway } from "../../../gateways/app.js";
import { createCoreClients } from "../../../gateways/core-clients.js";
import { fail } from "../../../core/errors.js";
import { createCapturedLogger } from "../../support/logs.js";

/** Each reason's JSON-RPC error code: the published codes, and our documented choices for the rest. */
const EXPECTED: Partial<Record<Reason, [number, string]>> = {
  [Reason.INVALID_REQUEST]: [-32602, "invalid_params"],
  [Reason.NOT_FOUND]: [-32602, "not_found"],
  [Reason.RATE_LIMITED]: [-32004, "rate_limited"],
  [Reason.IDEMPOTENCY_CONFLICT]: [-32602, "idempotency_conflict"],
  [Reason.INVALID_CLIENT]: [-32001, "invalid_client"],
  [Reason.CLIENT_INACTIVE]: [-32001, "invalid_client"],
  [Reason.UNSUPPORTED_GRANT_TYPE]: [-32602, "unsupported_grant_type"],
  [Reason.UNAUTHORIZED_CLIENT]: [-32602, "unauthorized_client"],
  [Reason.INVALID_SCOPE]: [-32602, "invalid_scope"],
  [Reason.SIGNING_UNAVAILABLE]: [-32603, "temporarily_unavailable"],
  [Reason.OVERLOADED]: [-32603, "temporarily_unavailable"],
  [Reason.UNAVAILABLE]: [-32603, "temporarily_unavailable"],
  [Reason.INVALID_GRANT]: [-32001, "invalid_grant"],
  [Reason.INVALID_CLIENT_METADATA]: [-32602, "invalid_params"],
  [Reason.INVALID_REDIRECT_URI]: [-32602, "invalid_params"],
  [Reason.ACCESS_DENIED]: [-32002, "access_denied"],
  [Reason.INVALID_TARGET]: [-32602, "invalid_target"],
  [Reason.INVALID_TOKEN]: [-32001, "invalid_token"],
  [Reason.AUTH_UNAVAILABLE]: [-32603, "auth_unavailable"],
  [Reason.GRANT_REQUIRED]: [-32002, "grant_required"],
  [Reason.USER_INACTIVE]: [-32002, "user_inactive"],
  [Reason.USER_NOT_FOUND]: [-32602, "not_found"],
  [Reason.AUDIT_UNAVAILABLE]: [-32603, "audit_unavailable"],
  [Reason.PROVIDER_UNAVAILABLE]: [-32603, "temporarily_unavailable"],
  [Reason.INVALID_CURSOR]: [-32602, "invalid_cursor"],
  [Reason.INSUFFICIENT_SCOPE]: [-32002, "insufficient_scope"],
  [Reason.POLICY_DENIED]: [-32002, "policy_denied"],
  [Reason.INSUFFICIENT_FUNDS]: [-32003, "insufficient_funds"],
  [Reason.VAULT_CONTENTION]: [-32005, "vault_contention"],
  [Reason.PROVISIONING_FAILED]: [-32603, "provisioning_failed"],
  [Reason.WRONG_ENDPOINT]: [-32601, "wrong_endpoint"],
  [Reason.TOKEN_UNSUPPORTED]: [-32602, "token_unsupported"],
};

/** Table-driven: every Reason core can raise renders inside the JSON-RPC envelope. Core is a stub here on purpose: only the envelope is under test. */
describe("JSON-RPC envelope for every Reason", () => {
  let app: FastifyInstance;
  let url: string;
  let current: Reason = Reason.UNSPECIFIED;
  const SECRET = "internal detail that must not leak";

  before(async () => {
    const transport = createRouterTransport(({ rpc }) => {
      rpc(GrantsService.method.verifyAgentToken, () => ({ grant: { grantId: "g", userId: "u", vaultId: "v", scopes: ["accounts:read"] } }));
      rpc(BudgetsService.method.getBalance, () =>
        fail(current, (EXPECTED[current]?.[0] ?? -32603) === -32603 ? SECRET : "client-facing message", { retryAfterSeconds: 60 }),
      );
    });
    app = await buildGateway({ clients: createCoreClients(transport), logger: createCapturedLogger().logger });
    await app.listen({ port: 0, host: "127.0.0.1" });
    url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  });
  after(() => app.close());

  for (const reason of Object.values(Reason).filter((v): v is Reason => typeof v === "number")) {
    it(`renders ${Reason[reason]}`, async () => {
      current = reason;
      const res = await fetch(`${url}/mcp/read`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: "Bearer t" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 7, method: "accounts.balance", params: {} }),
      });
      const text = await res.text();
      const body = JSON.parse(text) as { id: number; error: { code: number; message: string; data: Record<string, unknown> } };
      const [code, reasonId] = EXPECTED[reason] ?? [-32603, "internal_error"];
      const challenged: Partial<Record<Reason, number>> = { [Reason.INVALID_TOKEN]: 401, [Reason.INSUFFICIENT_SCOPE]: 403 };
      expect(res.status).to.equal(challenged[reason] ?? 200);
      expect(res.headers.get("www-authenticate") !== null).to.equal(reason in challenged);
      expect(body.id).to.equal(7);
      expect(body.error.code).to.equal(code);
      expect(body.error.data.reason_id).to.equal(reasonId);
      expect(body.error.data.request_id).to.equal(res.headers.get("x-request-id"));
      // The wait rides on -32004, and on a dependency outage (still -32603).
      expect(body.error.data.retry_after_seconds === 60).to.equal(reason === Reason.RATE_LIMITED || reason === Reason.UNAVAILABLE);
      if (code === -32603) {
        expect(body.error.message).to.equal("Internal error");
        expect(text).to.not.include(SECRET);
      }
    });
  }
});
