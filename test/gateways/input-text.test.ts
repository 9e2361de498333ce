import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { Code } from "@connectrpc/connect";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../support/stack.js";
import { budgetParams, createOwner, grantFor } from "../support/budgets.js";
import { postRpc } from "../support/mcp.js";
import { basic, createPartner, mintPartnerToken, postToken } from "../support/partners.js";
import { api, createUserFor } from "../support/resources.js";
import { bindTreasury } from "../support/treasury.js";
import { bearerMd, startGrpcCore } from "../support/grpc-core.js";
import { expectHttpError, expectRefused, grpcRefusalOf, refusalOf } from "../support/refusals.js";

const NUL = "a\u0000b";
const LONE = "a\ud800b";
const emoji = (n: number) => "\u{1F600}".repeat(n);

/**
 * Text that no store can keep (NUL, unpaired surrogates) is refused as bad input on every
 * surface, naming the field, never as a 5xx clients would retry unchanged; lengths count
 * characters (code points) the same way at the gateway and in core.
 */
describe("input text rules on every surface", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, provisioningLimitPerMinute: 100_000 });
  });
  after(() => stack.close());

  const agentToken = async () => grantFor(stack, await createOwner(stack), { stepUp: true });
  const createBudgetRpc = (token: string, args: Record<string, unknown>) =>
    postRpc(
      `${stack.url}/mcp/treasury`,
      {
        jsonrpc: "2.0",
        id: 1,
        method: "agent.budget.create",
        params: { purpose: "trip", display_name: "Trip", chain_allowlist: ["base"], idempotency_key: `k-${randomUUID()}`, ...args },
      },
      { authorization: `Bearer ${token}` },
    );

  describe("JSON-RPC tools", () => {
    for (const [label, value] of [
      ["NUL", NUL],
      ["a lone surrogate", LONE],
    ] as const) {
      it(`agent.budget.create with ${label} in display_name is -32602 naming the field`, async () => {
        const res = await createBudgetRpc(await agentToken(), { display_name: value });
        expect(res.status, res.text).to.equal(200);
        expect(res.json!.error.code).to.equal(-32602);
        expect(res.json!.error.data.reason_id).to.equal("invalid_params");
        expect(res.json!.error.data.errors[0].path).to.equal("/display_name");
      });
    }

    it("a NUL in a property name is -32602 too", async () => {
      const res = await createBudgetRpc(await agentToken(), { "x\u0000": 1 });
      expect(res.json!.error.code, res.text).to.equal(-32602);
    });

    it("idempotency_key counts characters: 65 and 128 emoji are accepted, 129 refused", async () => {
      const token = await agentToken();
      for (const n of [65, 128]) {
        const res = await createBudgetRpc(token, { idempotency_key: emoji(n) });
        expect(res.json!.error, `${n} emoji: ${res.text}`).to.equal(undefined);
        expect(res.json!.result.status).to.be.a("string");
      }
      const res = await createBudgetRpc(token, { idempotency_key: emoji(129) });
      expect(res.json!.error.code, res.text).to.equal(-32602);
      expect(res.json!.error.data.errors[0].path).to.equal("/idempotency_key");
    });

    it("display_name counts characters: 100 emoji accepted, 101 refused", async () => {
      const token = await agentToken();
      expect((await createBudgetRpc(token, { display_name: emoji(100) })).json!.error).to.equal(undefined);
      expect((await createBudgetRpc(token, { display_name: emoji(101) })).json!.error.code).to.equal(-32602);
    });
  });

  describe("core, called directly", () => {
    it("refuses NUL and lone surrogates (in-process transport keeps JS strings as they are) naming the field", async () => {
      for (const displayName of [NUL, LONE]) {
        const r = await refusalOf(stack.clients.budgets.createBudget({ accessToken: await agentToken(), ...budgetParams({ displayName }) }));
        expect(r.code).to.equal(Code.InvalidArgument);
        expect(r.detail?.reason).to.equal(Reason.INVALID_REQUEST);
        expect(r.message).to.match(/^display_name /);
      }
    });

    it("names nested and repeated fields (treasury batch items[0].reference)", async () => {
      const r = await refusalOf(
        stack.clients.treasury.executeBatch({
          accessToken: "t",
          idempotencyKey: "k-1",
          payerEntityId: randomUUID(),
          items: [{ executionId: "e", payoutId: "p", recipientUserId: randomUUID(), amountCents: 1n, currency: "USD", reference: LONE }],
        }),
      );
      expect(r.detail?.reason).to.equal(Reason.INVALID_REQUEST);
      expect(r.message).to.match(/^items\[0\]\.reference /);
    });

    it("counts idempotency_key and display_name in characters, like the gateway", async () => {
      const token = await agentToken();
      for (const n of [65, 128]) {
        const res = await stack.clients.budgets.createBudget({ accessToken: token, ...budgetParams({ idempotencyKey: emoji(n), displayName: emoji(100) }) });
        expect(res.budget?.budgetId).to.be.a("string");
      }
      await expectRefused(stack.clients.budgets.createBudget({ accessToken: token, ...budgetParams({ idempotencyKey: emoji(129) }) }), Reason.INVALID_REQUEST);
      await expectRefused(stack.clients.budgets.createBudget({ accessToken: token, ...budgetParams({ displayName: emoji(101) }) }), Reason.INVALID_REQUEST);
    });

    it("over real gRPC, a NUL is INVALID_ARGUMENT, not INTERNAL", async () => {
      const grpcCore = await startGrpcCore(stack);
      try {
        const err = await grpcRefusalOf(
          grpcCore.call("vaultgate.partners.v1.PartnersService", "CreateUser", { email: "x\u0000@example.com" }, bearerMd(stack.adminToken)),
        );
        expect(err.code).to.equal(3); // INVALID_ARGUMENT
        expect(err.details).to.match(/^email /);
      } finally {
        await grpcCore.close();
      }
    });
  });

  describe("partner REST and the token endpoint", () => {
    it("POST /users with NUL in email is 400 invalid_request naming email", async () => {
      const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
      const token = await mintPartnerToken(stack, partner);
      const res = await api(stack, "POST", "/users", { token, json: { email: `u${NUL}@example.com` } });
      expectHttpError(res, 400, "invalid_request");
      expect((res.body as { error: { message: string } }).error.message).to.match(/^email /);
    });

    it("a lone surrogate in a treasury batch reference is 400 invalid_request naming the item", async () => {
      const partner = await createPartner(stack, { entitlements: ["treasury:write", "payouts:receive"] });
      const payer = await bindTreasury(stack.admin, partner, { balanceCents: 10_000n });
      const { userId } = await createUserFor(stack, partner, ["payouts:receive"]);
      const token = await mintPartnerToken(stack, partner);
      // JSON.stringify escapes a lone surrogate as \ud800, which JSON.parse turns back into one.
      const res = await api(stack, "POST", "/treasury/payouts", {
        token,
        headers: { "idempotency-key": `k-${randomUUID()}` },
        json: {
          payer_entity_id: payer,
          items: [{ execution_id: "e-1", payout_id: "p-1", recipient: { user_id: userId }, amount_cents: 100, currency: "USD", reference: LONE }],
        },
      });
      expectHttpError(res, 400, "invalid_request");
      expect((res.body as { error: { message: string } }).error.message).to.match(/^items\[0\]\.reference /);
    });

    it("a NUL in a query parameter is 400 invalid_request", async () => {
      const partner = await createPartner(stack, { entitlements: ["kyc:read", "transfers:read"] });
      const token = await mintPartnerToken(stack, partner);
      const { userId } = await createUserFor(stack, partner);
      const res = await api(stack, "GET", `/users/${userId}/transfers?cursor=a%00b`, { token });
      expectHttpError(res, 400, "invalid_request");
    });

    it("a NUL in a query parameter's name is named as the query's, not the body's", async () => {
      const partner = await createPartner(stack, { entitlements: ["transfers:read"] });
      const token = await mintPartnerToken(stack, partner);
      const { userId } = await createUserFor(stack, partner);
      const res = await api(stack, "GET", `/users/${userId}/transfers?a%00b=1`, { token });
      expectHttpError(res, 400, "invalid_request");
      expect((res.body as { error: { message: string } }).error.message).to.equal("the query string has a field name that must not contain NUL characters");
    });

    it("client_id=...%00 at the partner token endpoint is 400 invalid_request", async () => {
      const res = await postToken(stack.url, "grant_type=client_credentials&client_id=abc%00&client_secret=x");
      expect(res.status).to.equal(400);
      expect(await res.json()).to.deep.equal({ error: "invalid_request", error_description: "client_id must not contain NUL characters" });
    });

    it("a NUL inside HTTP Basic credentials is refused without a 5xx", async () => {
      const res = await postToken(stack.url, "grant_type=client_credentials", { authorization: basic("abc\u0000", "secret") });
      expect(res.status).to.be.within(400, 499);
    });
  });

  describe("agent OAuth and pages", () => {
    it("client_id=...%00 at the agent token endpoint is 400 invalid_request", async () => {
      const res = await fetch(`${stack.url}/oauth2/token`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "grant_type=authorization_code&code=x&client_id=abc%00&client_secret=y",
      });
      expect(res.status).to.equal(400);
      expect(((await res.json()) as { error: string }).error).to.equal("invalid_request");
    });

    it("dynamic registration with a lone surrogate in client_name is a 400", async () => {
      const res = await fetch(`${stack.url}/oauth2/register`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ client_name: LONE, redirect_uris: ["https://agent.example/cb"] }),
      });
      expect(res.status, await res.clone().text()).to.equal(400);
    });

    it("the sign-in form with a NUL in the e-mail is an HTML 400 naming the field", async () => {
      const res = await fetch(`${stack.url}/signin`, {
        method: "POST",
        headers: { "content-type": "application/x-www-form-urlencoded" },
        body: "email=a%00b%40example.com&csrf=x",
      });
      expect(res.status).to.equal(400);
      expect(res.headers.get("content-type")).to.match(/^text\/html/);
      expect(await res.text()).to.include("email must not contain NUL characters");
    });

    it("a NUL in a page address is an HTML 400", async () => {
      const res = await fetch(`${stack.url}/oauth2/authorize?client_id=a%00&response_type=code`);
      expect(res.status).to.equal(400);
      expect(res.headers.get("content-type")).to.match(/^text\/html/);
    });
  });
});
