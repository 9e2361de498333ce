import { randomUUID } from "node:crypto";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { buildGateway } from "../../gateways/app.js";
import { createCoreClients } from "../../gateways/core-clients.js";
import { startStack, type TestStack } from "../support/stack.js";
import { bearerMd, startGrpcCore, type GrpcCore } from "../support/grpc-core.js";

const REGISTRATION = {
  client_name: "Request id test agent",
  redirect_uris: ["http://127.0.0.1:9/callback"],
  grant_types: ["authorization_code", "refresh_token"],
  response_types: ["code"],
  token_endpoint_auth_method: "client_secret_post",
  scope: "accounts:read",
};

/**
 * Core believes a request id only from a caller that proved it is one of our gateways
 * (the gateway credential, or a gateway in the same process); anyone else reaching the
 * core port gets an id core makes, so nobody can plant an id on an audit record.
 */
describe("request ids core accepts (core on its real port)", () => {
  let stack: TestStack;
  let grpcCore: GrpcCore;
  let splitGateway: FastifyInstance;
  let splitUrl: string;

  before(async () => {
    stack = await startStack();
    grpcCore = await startGrpcCore(stack);
    // A gateway in its own role: gRPC over h2c to core, presenting GATEWAY_TOKEN.
    const transport = createGrpcTransport({ baseUrl: grpcCore.server.url });
    const issuer = stack.issuer;
    splitGateway = await buildGateway({
      clients: createCoreClients(transport, { gatewayToken: stack.gatewayToken }),
      logger: stack.logs.logger,
      urls: { issuer, baseUrl: issuer, authUrl: issuer, appUrl: issuer, mcpUrl: issuer },
    });
    await splitGateway.listen({ port: 0, host: "127.0.0.1" });
    splitUrl = `http://127.0.0.1:${(splitGateway.server.address() as { port: number }).port}`;
  });
  after(async () => {
    await splitGateway?.close();
    await grpcCore?.close();
    await stack?.close();
  });

  const registrationRecord = async (clientId: string) =>
    stack.core.db("audit_records").where({ action: "oauth.client.register", subject: clientId }).first<{ request_id: string } | undefined>();

  const registerDirect = async (extra: Record<string, string>) => {
    const res = await grpcCore.call(
      "vaultgate.grants.v1.GrantsService",
      "RegisterClient",
      {
        client_name: REGISTRATION.client_name,
        redirect_uris: REGISTRATION.redirect_uris,
        grant_types: REGISTRATION.grant_types,
        response_types: REGISTRATION.response_types,
        token_endpoint_auth_method: REGISTRATION.token_endpoint_auth_method,
        scope: REGISTRATION.scope,
      },
      bearerMd(undefined, extra),
    );
    return String((res as { client: { client_id: string } }).client.client_id);
  };

  it("a direct gRPC caller's own x-request-id never reaches the audit record", async () => {
    const planted = randomUUID();
    const clientId = await registerDirect({ "x-request-id": planted });
    const record = await registrationRecord(clientId);
    expect(record, "the registration is audited").to.not.equal(undefined);
    expect(record!.request_id).to.not.equal(planted);
    expect(record!.request_id).to.match(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(await stack.core.db("audit_records").where({ request_id: planted }), "no record anywhere carries the planted id").to.have.length(0);
  });

  it("a caller with a wrong gateway credential is a direct caller: its id is not used either", async () => {
    const planted = randomUUID();
    const clientId = await registerDirect({ "x-request-id": planted, "x-vaultgate-gateway": `${stack.gatewayToken.slice(0, -1)}x` });
    const record = await registrationRecord(clientId);
    expect(record!.request_id).to.not.equal(planted);
    expect(await stack.core.db("audit_records").where({ request_id: planted })).to.have.length(0);
  });

  it("the id of a gateway presenting the gateway credential over gRPC lands in the audit record", async () => {
    const res = await fetch(`${splitUrl}/oauth2/register`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-request-id": randomUUID() },
      body: JSON.stringify(REGISTRATION),
    });
    expect(res.status).to.equal(201);
    const body = (await res.json()) as { client_id: string };
    const record = await registrationRecord(body.client_id);
    expect(record!.request_id).to.equal(res.headers.get("x-request-id"));
  });

  it("the id of a gateway in core's process lands in the audit record", async () => {
    const inProcess = await startStack({ gateway: true });
    try {
      const res = await fetch(`${inProcess.url}/oauth2/register`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(REGISTRATION),
      });
      expect(res.status).to.equal(201);
      const body = (await res.json()) as { client_id: string };
      const record = await inProcess.core
        .db("audit_records")
        .where({ action: "oauth.client.register", subject: body.client_id })
        .first<{ request_id: string }>();
      expect(record!.request_id).to.equal(res.headers.get("x-request-id"));
    } finally {
      await inProcess.close();
    }
  });
});
