import type { FastifyInstance } from "fastify";
import { createInProcessTransport } from "../../core/in-process-transport.js";
import { buildGateway } from "../../gateways/app.js";
import { createCoreClients } from "../../gateways/core-clients.js";
import type { JsonRpcError } from "./refusals.js";
import { startStack, type StackOptions, type TestStack } from "./stack.js";

export const TEST_MCP_URL = "http://mcp.vaultgate.test";

export type McpStack = TestStack;

/**
 * Real core on the test database plus the HTTP gateway with the JSON-RPC surface, on
 * 127.0.0.1:0; the gateway names TEST_MCP_URL in its 401 challenges. Bearers are real
 * grant tokens (test/support/budgets.ts grantFor).
 */
export async function startMcpStack(options: StackOptions = {}): Promise<McpStack> {
  const stack = await startStack({ ...options, gateway: false });
  // The gateway's transport in one process, as `vaultgate serve` wires it.
  const transport = createInProcessTransport(stack.core.routes, stack.core.interceptors);
  const gateway: FastifyInstance = await buildGateway({
    clients: createCoreClients(transport, { gatewayToken: stack.gatewayToken }),
    logger: stack.logs.logger,
    mcpUrl: TEST_MCP_URL,
  });
  await gateway.listen({ port: 0, host: "127.0.0.1" });
  const url = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
  return {
    ...stack,
    url,
    gateway,
    async close() {
      await gateway.close();
      await stack.close();
    },
  };
}

/** One JSON-RPC response (alone or in a batch): the method's result, in the shape the caller reads, or an error. */
export interface JsonRpcReply<Result = Record<string, unknown>> {
  jsonrpc: "2.0";
  id: string | number | null;
  result?: Result;
  error?: JsonRpcError;
}

/** POSTs a raw body to a JSON-RPC endpoint. */
export async function postRpc(url: string, body: string | object, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  // biome-ignore lint/suspicious/noExplicitAny: some thirty suites read their methods' own results from this body; typing every read is a change of its own
  return { url, status: res.status, headers: res.headers, text, json: text ? (JSON.parse(text) as Record<string, any>) : undefined };
}
