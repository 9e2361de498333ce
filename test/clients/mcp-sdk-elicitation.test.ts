import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ErrorCode, McpError, UrlElicitationRequiredError } from "@modelcontextprotocol/sdk/types.js";
import { createInProcessTransport } from "../../core/in-process-transport.js";
import { buildGateway } from "../../gateways/app.js";
import { createCoreClients } from "../../gateways/core-clients.js";
import { postRpc, startMcpStack, TEST_MCP_URL, type McpStack } from "../support/mcp.js";
import { createOwner, grantFor, ownerSession, type TestOwner } from "../support/budgets.js";
import { thrownBy } from "../support/refusals.js";

const B64URL = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const COUNTERPARTY = { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" };
const ELICITING_INIT = {
  protocolVersion: "2025-11-25",
  capabilities: { elicitation: { url: {} } },
  clientInfo: { name: "raw", version: "1" },
};

/**
 * Step-up as URL-mode elicitation: a client that declared `elicitation.url` gets -32042 with the
 * approval URL and its retry completes once approved; other clients keep `pending_step_up`.
 */
describe("MCP SDK client: step-up as URL elicitation", () => {
  let stack: McpStack;
  const clients: Client[] = [];
  const gateways: FastifyInstance[] = [];
  let seq = 0;
  const key = (what: string) => `elicit-${what}-${Date.now()}-${seq++}`;

  before(async () => {
    stack = await startMcpStack();
  });
  after(async () => {
    for (const c of clients) await c.close().catch(() => undefined);
    for (const g of gateways) await g.close();
    await stack.close();
  });

  /** Another gateway on the same core with the GATEWAY_TOKEN given (a replica, or another deployment). */
  async function gatewayWith(gatewayToken: string) {
    const gateway = await buildGateway({
      clients: createCoreClients(createInProcessTransport(stack.core.routes, stack.core.interceptors), { gatewayToken }),
      logger: stack.logs.logger,
      mcpUrl: TEST_MCP_URL,
    });
    await gateway.listen({ port: 0, host: "127.0.0.1" });
    gateways.push(gateway);
    return `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
  }

  async function connect(path: string, token: string, options: { urlElicitation?: boolean } = {}) {
    const capabilities = options.urlElicitation ? { elicitation: { url: {} } } : {};
    const client = new Client({ name: "vaultgate-test", version: "1.0.0" }, { capabilities });
    const transport = new StreamableHTTPClientTransport(new URL(`${stack.url}${path}`), {
      requestInit: { headers: { authorization: `Bearer ${token}` } },
    });
    await client.connect(transport);
    clients.push(client);
    return { client, transport };
  }

  /** An active budget whose payments over 500 cents need the owner's approval, funded, and a grant on it. */
  async function steppedUpBudget(): Promise<{ owner: TestOwner; token: string }> {
    const owner = await createOwner(stack);
    const { client: treasury } = await connect("/mcp/treasury", await grantFor(stack, owner, { stepUp: true }));
    const created = await treasury.callTool({
      name: "agent.budget.create",
      arguments: {
        purpose: "ap",
        display_name: "Accounts payable",
        amount_cap_cents_per_tx: 10_000,
        step_up_amount_cents: 500,
        chain_allowlist: ["base"],
        idempotency_key: key("budget"),
      },
    });
    const budget = created.structuredContent as { vault_id: string; agent_principal_id: string; status: string };
    expect(budget.status).to.equal("active");
    await stack.admin.budgets.fundVault({ vaultId: budget.vault_id, amountCents: 100_000n });
    const token = await grantFor(stack, { userId: owner.userId, vaultId: budget.vault_id, agentPrincipalId: budget.agent_principal_id });
    return { owner, token };
  }

  const payment = (amount: number, idempotencyKey: string) => ({
    counterparty: COUNTERPARTY,
    amount_cents: amount,
    currency: "USD",
    idempotency_key: idempotencyKey,
  });

  async function elicitationOf(call: Promise<unknown>): Promise<UrlElicitationRequiredError> {
    const err = await thrownBy(call);
    expect(err).to.be.instanceOf(UrlElicitationRequiredError);
    return err as UrlElicitationRequiredError;
  }

  async function approve(owner: TestOwner, paymentId: string) {
    const sessionToken = await ownerSession(stack, owner.userId, { stepUp: true });
    await stack.clients.budgets.approvePayment({ sessionToken, paymentId });
  }

  it("a client that declared URL elicitation gets -32042 with the approval URL; its retry completes after the owner approves", async () => {
    const { owner, token } = await steppedUpBudget();
    const { client, transport } = await connect("/mcp/write", token, { urlElicitation: true });
    // The SDK stored the session id we issued on initialize and sends it back.
    expect(transport.sessionId).to.match(/^mcp1\.2025-11-25\.u\./);
    await client.listTools();

    const args = payment(700, key("pay"));
    const first = await elicitationOf(client.callTool({ name: "payments.initiate", arguments: args }));
    expect(first.code).to.equal(ErrorCode.UrlElicitationRequired);
    expect(first.elicitations).to.have.length(1);
    const [elicitation] = first.elicitations;
    expect(elicitation!.mode).to.equal("url");
    expect(elicitation!.message).to.match(/owner must approve it in their browser/);
    // The SDK keeps only `elicitations` of our data (reason_id, request_id: see the direct-call test).
    expect(first.message).to.match(/URL elicitation required/);
    const paymentId = elicitation!.elicitationId;
    expect(elicitation!.url).to.match(/^https?:\/\/[^/]+\/dashboard\/agents\/[0-9a-f-]{36}\?payment=/);
    expect(new URL(elicitation!.url).searchParams.get("payment")).to.equal(paymentId);

    // A retry before approval asks for the same elicitation (stable id per payment).
    const again = await elicitationOf(client.callTool({ name: "payments.initiate", arguments: args }));
    expect(again.elicitations[0]!.elicitationId).to.equal(paymentId);
    expect(again.elicitations[0]!.url).to.equal(elicitation!.url);

    await approve(owner, paymentId);
    const done = await client.callTool({ name: "payments.initiate", arguments: args });
    expect(done.isError).to.equal(false);
    expect(done.structuredContent).to.deep.equal({ kind: "accepted", payment_id: paymentId, status: "completed" });

    // Below the step-up amount nothing changes for this client.
    const small = await client.callTool({ name: "payments.initiate", arguments: payment(100, key("small")) });
    expect((small.structuredContent as { kind: string }).kind).to.equal("accepted");
    // The SDK may end a session with DELETE: our 405 is accepted as "no session to end".
    await transport.terminateSession();
  });

  it("after the owner declines, the retry is an isError access_denied result, not another elicitation", async () => {
    const { owner, token } = await steppedUpBudget();
    const { client } = await connect("/mcp/write", token, { urlElicitation: true });
    const args = payment(800, key("decline"));
    const paymentId = (await elicitationOf(client.callTool({ name: "payments.initiate", arguments: args }))).elicitations[0]!.elicitationId;
    await stack.clients.budgets.declinePayment({ sessionToken: await ownerSession(stack, owner.userId), paymentId });
    const retry = await client.callTool({ name: "payments.initiate", arguments: args });
    expect(retry.isError).to.equal(true);
    const error = (retry._meta as { error: { code: number; data: Record<string, unknown> } }).error;
    expect([error.code, error.data.reason_id]).to.deep.equal([-32002, "access_denied"]);
  });

  it("concurrent retries after approval complete the one payment once", async () => {
    const { owner, token } = await steppedUpBudget();
    const { client } = await connect("/mcp/write", token, { urlElicitation: true });
    const args = payment(900, key("race"));
    const paymentId = (await elicitationOf(client.callTool({ name: "payments.initiate", arguments: args }))).elicitations[0]!.elicitationId;
    await approve(owner, paymentId);
    const results = await Promise.all(Array.from({ length: 4 }, () => client.callTool({ name: "payments.initiate", arguments: args })));
    for (const r of results) expect(r.structuredContent).to.deep.equal({ kind: "accepted", payment_id: paymentId, status: "completed" });
    const balance = await connect("/mcp/read", token);
    const { structuredContent } = await balance.client.callTool({ name: "accounts.balance", arguments: {} });
    expect((structuredContent as { balance_cents: number }).balance_cents).to.equal(100_000 - 900);
  });

  it("a client without the capability keeps the spec's pending_step_up result", async () => {
    const { token } = await steppedUpBudget();
    const { client, transport } = await connect("/mcp/write", token);
    expect(transport.sessionId).to.match(/^mcp1\.2025-11-25\.0\./);
    const res = await client.callTool({ name: "payments.initiate", arguments: payment(700, key("plain")) });
    expect(res.isError).to.equal(false);
    const result = res.structuredContent as { kind: string; payment_id: string; step_up_url: string };
    expect(result.kind).to.equal("pending_step_up");
    expect(new URL(result.step_up_url).searchParams.get("payment")).to.equal(result.payment_id);
  });

  it("form-only elicitation, or an older revision, is not URL elicitation", async () => {
    const { token } = await steppedUpBudget();
    for (const init of [
      { ...ELICITING_INIT, capabilities: { elicitation: {} } },
      { ...ELICITING_INIT, capabilities: { elicitation: { form: {} } } },
      { ...ELICITING_INIT, capabilities: { elicitation: { url: true } } },
      { ...ELICITING_INIT, protocolVersion: "2025-06-18" },
    ]) {
      const res = await postRpc(`${stack.url}/mcp/write`, { jsonrpc: "2.0", id: 1, method: "initialize", params: init }, { authorization: `Bearer ${token}` });
      const sessionId = res.headers.get("mcp-session-id")!;
      expect(sessionId, JSON.stringify(init)).to.match(/^mcp1\.\d{4}-\d{2}-\d{2}\.0\./);
      const call = await postRpc(
        `${stack.url}/mcp/write`,
        { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "payments.initiate", arguments: payment(700, key("form")) } },
        { authorization: `Bearer ${token}`, "mcp-session-id": sessionId },
      );
      expect(call.json!.result.structuredContent.kind).to.equal("pending_step_up");
    }
  });

  it("a forged, garbage or foreign session id is ignored (no capability), never an error", async () => {
    const { token } = await steppedUpBudget();
    const init = await postRpc(
      `${stack.url}/mcp/write`,
      { jsonrpc: "2.0", id: 1, method: "initialize", params: ELICITING_INIT },
      { authorization: `Bearer ${token}` },
    );
    const genuine = init.headers.get("mcp-session-id")!;
    const [prefix, version, , nonce, mac] = genuine.split(".");
    const foreignUrl = await gatewayWith("another-deployment-gateway-token");
    const foreign = (
      await postRpc(`${foreignUrl}/mcp/write`, { jsonrpc: "2.0", id: 1, method: "initialize", params: ELICITING_INIT }, { authorization: `Bearer ${token}` })
    ).headers.get("mcp-session-id")!;
    expect(foreign).to.match(/\.u\./);
    const forged = [
      `${prefix}.${version}.u.${nonce}.${"A".repeat(43)}`, // right shape, wrong signature
      `${genuine.slice(0, -10)}${genuine.at(-10) === "A" ? "B" : "A"}${genuine.slice(-9)}`, // one character of the signature changed
      `${genuine.slice(0, -1)}${B64URL[B64URL.indexOf(genuine.at(-1)!) ^ 1]}`, // the same bytes, non-canonically encoded
      `${prefix}.2099-01-01.u.${nonce}.${mac}`, // signed fields changed
      foreign, // signed by a gateway with another GATEWAY_TOKEN
      "garbage",
      "",
      "x".repeat(10_000),
      "mcp1.2025-11-25.u.%%%%.%%%%",
    ];
    for (const sessionId of forged) {
      for (const body of [
        { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "payments.initiate", arguments: payment(700, key("forged")) } },
        { jsonrpc: "2.0", id: 3, method: "payments.initiate", params: payment(700, key("forged-direct")) },
      ]) {
        const res = await postRpc(`${stack.url}/mcp/write`, body, { authorization: `Bearer ${token}`, "mcp-session-id": sessionId });
        expect(res.status, sessionId).to.equal(200);
        const result = body.method === "tools/call" ? res.json!.result.structuredContent : res.json!.result;
        expect(result.kind, sessionId).to.equal("pending_step_up");
      }
    }
    // The genuine id still works, and a forged id never stands in for a bearer.
    const genuineCall = await postRpc(
      `${stack.url}/mcp/write`,
      { jsonrpc: "2.0", id: 4, method: "tools/call", params: { name: "payments.initiate", arguments: payment(700, key("genuine")) } },
      { authorization: `Bearer ${token}`, "mcp-session-id": genuine },
    );
    expect(genuineCall.json!.error.code).to.equal(-32042);
    const noBearer = await postRpc(
      `${stack.url}/mcp/write`,
      { jsonrpc: "2.0", id: 5, method: "tools/call", params: { name: "payments.initiate", arguments: payment(700, key("nobearer")) } },
      { "mcp-session-id": genuine },
    );
    expect(noBearer.status).to.equal(401);
  });

  it("a replica with the same GATEWAY_TOKEN honours the session id another replica issued", async () => {
    const { token } = await steppedUpBudget();
    const init = await postRpc(
      `${stack.url}/mcp/write`,
      { jsonrpc: "2.0", id: 1, method: "initialize", params: ELICITING_INIT },
      { authorization: `Bearer ${token}` },
    );
    const sessionId = init.headers.get("mcp-session-id")!;
    const replicaUrl = await gatewayWith(stack.gatewayToken);
    const res = await postRpc(
      `${replicaUrl}/mcp/write`,
      { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "payments.initiate", arguments: payment(700, key("replica")) } },
      { authorization: `Bearer ${token}`, "mcp-session-id": sessionId },
    );
    expect(res.json!.error.code).to.equal(-32042);
    expect(res.json!.error.data.elicitations[0].mode).to.equal("url");
  });

  it("direct method calls follow the same opt-in: the spec result by default, -32042 with an eliciting session id", async () => {
    const { owner, token } = await steppedUpBudget();
    const args = payment(700, key("direct"));
    const plain = await postRpc(
      `${stack.url}/mcp/write`,
      { jsonrpc: "2.0", id: 1, method: "payments.initiate", params: args },
      { authorization: `Bearer ${token}` },
    );
    expect(plain.json!.result.kind).to.equal("pending_step_up");
    const paymentId = plain.json!.result.payment_id as string;

    const init = await postRpc(
      `${stack.url}/mcp/write`,
      { jsonrpc: "2.0", id: 2, method: "initialize", params: ELICITING_INIT },
      { authorization: `Bearer ${token}` },
    );
    const headers = { authorization: `Bearer ${token}`, "mcp-session-id": init.headers.get("mcp-session-id")! };
    const elicited = await postRpc(`${stack.url}/mcp/write`, { jsonrpc: "2.0", id: 3, method: "payments.initiate", params: args }, headers);
    expect(elicited.status).to.equal(200);
    const error = elicited.json!.error as {
      code: number;
      message: string;
      data: { reason_id: string; request_id: string; elicitations: { message: string }[] };
    };
    expect(error.code).to.equal(-32042);
    expect(error.data.reason_id).to.equal("step_up_required");
    expect(error.data.request_id).to.equal(elicited.headers.get("x-request-id"));
    expect(error.data.elicitations).to.deep.equal([
      { mode: "url", elicitationId: paymentId, url: plain.json!.result.step_up_url, message: error.data.elicitations[0].message },
    ]);

    await approve(owner, paymentId);
    const done = await postRpc(`${stack.url}/mcp/write`, { jsonrpc: "2.0", id: 4, method: "payments.initiate", params: args }, headers);
    expect(done.json!.result).to.deep.equal({ kind: "accepted", payment_id: paymentId, status: "completed" });
  });

  it("-32042 stays a JSON-RPC error inside tools/call (not an isError result); other refusals stay isError", async () => {
    const { token } = await steppedUpBudget();
    const { client } = await connect("/mcp/write", token, { urlElicitation: true });
    const refused = await client.callTool({ name: "payments.initiate", arguments: payment(20_000, key("cap")) });
    expect(refused.isError).to.equal(true);
    const err = await thrownBy(client.callTool({ name: "payments.initiate", arguments: payment(700, key("proto")) }));
    expect(err).to.be.instanceOf(McpError);
    expect((err as McpError).code).to.equal(-32042);
  });
});
