import { randomBytes } from "node:crypto";
import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import type { DescService } from "@bufbuild/protobuf";
import type { FastifyInstance } from "fastify";
import { GrantsService } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import type { GrantContext } from "../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { fail } from "../../core/errors.js";
import { createInProcessTransport } from "../../core/in-process-transport.js";
import { buildGateway } from "../../gateways/app.js";
import { createCoreClients } from "../../gateways/core-clients.js";
import { startStack, type StackOptions, type TestStack } from "./stack.js";

export const TEST_MCP_URL = "http://mcp.vaultgate.test";

export interface McpStack extends TestStack {
  /**
   * Registers a stand-in bearer for a grant context. VerifyAgentToken answers for these
   * tokens and delegates every other token to the real GrantsService, so tests written
   * against stand-ins keep working once real grant tokens exist.
   */
  bearerFor(grant: GrantContext): string;
  revokeStandIn(token: string): void;
}

/** Real core on the test database plus the HTTP gateway with the JSON-RPC surface, on 127.0.0.1:0. */
export async function startMcpStack(options: StackOptions = {}): Promise<McpStack> {
  const stack = await startStack({ ...options, gateway: false });
  const standIns = new Map<string, GrantContext>();
  const routes = (router: ConnectRouter) => {
    const wrapped: ConnectRouter = {
      handlers: router.handlers,
      rpc: router.rpc.bind(router),
      service<T extends DescService>(desc: T, impl: Partial<ServiceImpl<T>>, opts?: object) {
        if (desc.typeName !== GrantsService.typeName) return router.service(desc, impl, opts), wrapped;
        const real = impl as ServiceImpl<typeof GrantsService>;
        const merged: ServiceImpl<typeof GrantsService> = {
          ...real,
          async verifyAgentToken(req, ctx) {
            const g = standIns.get(req.accessToken);
            if (!g) {
              if (req.accessToken.startsWith("standin.")) fail(Reason.INVALID_TOKEN, "the grant is not active");
              return real.verifyAgentToken(req, ctx);
            }
            return {
              grant: {
                grantId: g.grantId,
                userId: g.userId,
                clientId: g.clientId,
                agentPrincipalId: g.agentPrincipalId,
                vaultId: g.vaultId,
                scopes: g.scopes,
                stepUp: g.stepUp,
                authTime: g.authTime,
              },
            };
          },
        };
        router.service(GrantsService, merged, opts);
        return wrapped;
      },
    };
    stack.core.routes(wrapped);
  };
  // The gateway's transport in one process, as `vaultgate serve` wires it.
  const transport = createInProcessTransport(routes, stack.core.interceptors);
  const gateway: FastifyInstance = await buildGateway({ clients: createCoreClients(transport), logger: stack.logs.logger, mcpUrl: TEST_MCP_URL });
  await gateway.listen({ port: 0, host: "127.0.0.1" });
  const url = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
  return {
    ...stack,
    url,
    gateway,
    bearerFor(grant) {
      const token = `standin.${randomBytes(12).toString("base64url")}`;
      standIns.set(token, grant);
      return token;
    },
    revokeStandIn(token) {
      standIns.delete(token);
    },
    async close() {
      await gateway.close();
      await stack.close();
    },
  };
}

/** POSTs a raw body to a JSON-RPC endpoint. */
export async function postRpc(url: string, body: string | object, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, json: text ? (JSON.parse(text) as Record<string, any>) : undefined };
}
