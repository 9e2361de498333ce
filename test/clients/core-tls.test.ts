import { fileURLToPath } from "node:url";
import { expect } from "chai";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { Interceptor } from "@connectrpc/connect";
import type { FastifyInstance } from "fastify";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { kClientAddress } from "../../core/context.js";
import { buildGateway } from "../../gateways/app.js";
import { createCoreClients, withRequestId } from "../../gateways/core-clients.js";
import { ConfigError, isLoopbackHost, loadConfig } from "../../cli/config.js";
import { loadCoreDial, loadCoreServerTls } from "../../cli/core-tls.js";
import { makeTestCerts, type TestCerts } from "../support/certs.js";
import { createScratchDatabase } from "../support/db.js";
import { runCli, startServiceProcess, tempDataDir, type ServiceProcess } from "../support/process.js";
import { basic, createPartner, postToken } from "../support/partners.js";
import { startStack, TEST_ISSUER, type TestStack } from "../support/stack.js";
import { grpcRefusalOf } from "../support/refusals.js";

const protoDir = fileURLToPath(new URL("../../proto", import.meta.url));

type Unary = (req: object, md: grpc.Metadata, cb: (err: grpc.ServiceError | null, res: Record<string, unknown>) => void) => void;
type Stub = grpc.Client & Record<string, Unary>;

const definition = protoLoader.loadSync(["vaultgate/grants/v1/grants.proto", "grpc/health/v1/health.proto"], {
  includeDirs: [protoDir],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
});
const loaded = grpc.loadPackageDefinition(definition) as unknown as {
  vaultgate: { grants: { v1: { GrantsService: grpc.ServiceClientConstructor } } };
  grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
};

/** A stock grpc-js stub for `address` (host:port) with the given channel credentials. */
function stub(kind: "health" | "grants", address: string, creds: grpc.ChannelCredentials): Stub {
  const Ctor = kind === "health" ? loaded.grpc.health.v1.Health : loaded.vaultgate.grants.v1.GrantsService;
  return new Ctor(address, creds) as Stub;
}

async function call(kind: "health" | "grants", address: string, creds: grpc.ChannelCredentials, method: string, req: object = {}) {
  const client = stub(kind, address, creds);
  try {
    return await new Promise<Record<string, unknown>>((resolve, reject) => {
      // A refused handshake may make grpc-js retry until the deadline.
      const fn = client[method] as unknown as (
        req: object,
        md: grpc.Metadata,
        options: grpc.CallOptions,
        cb: (err: grpc.ServiceError | null, res: Record<string, unknown>) => void,
      ) => void;
      fn.call(client, req, new grpc.Metadata(), { deadline: Date.now() + 5_000 }, (err, res) => (err ? reject(err) : resolve(res)));
    });
  } finally {
    client.close();
  }
}

const hostPort = (url: string) => url.replace(/^https?:\/\//, "");
const buf = (s: string) => Buffer.from(s);

/** Core's port on a network: TLS, mTLS, the gateway credential, and the cleartext rule. */
describe("core over TLS", function () {
  this.timeout(120_000);
  let certs: TestCerts;

  before(async () => {
    certs = await makeTestCerts();
  });
  after(async () => {
    await certs?.remove();
  });

  describe("TLS with a server certificate (no client certificates)", () => {
    let stack: TestStack;
    let server: CoreServer;

    before(async () => {
      stack = await startStack();
      const config = loadConfig({ CORE_TLS_CERT: certs.files.serverCert, CORE_TLS_KEY: certs.files.serverKey });
      server = await startCoreServer(stack.core, 0, "127.0.0.1", { tls: loadCoreServerTls(config) });
    });
    after(async () => {
      await server?.close();
      await stack?.close();
    });

    it("serves a stock grpc-js client that trusts the CA", async () => {
      expect(server.url).to.match(/^https:\/\/127\.0\.0\.1:\d+$/);
      const creds = grpc.credentials.createSsl(buf(certs.ca));
      expect((await call("health", hostPort(server.url), creds, "Check", { service: "" })).status).to.equal("SERVING");
      const jwks = await call("grants", hostPort(server.url), creds, "GetJwks");
      expect((JSON.parse(jwks.jwks_json as string) as { keys: unknown[] }).keys).to.have.length.greaterThan(0);
    });

    it("is refused by a client that does not trust the CA, and refuses cleartext", async () => {
      const untrusted = await grpcRefusalOf(call("health", hostPort(server.url), grpc.credentials.createSsl(), "Check", { service: "" }));
      expect(untrusted.code).to.equal(grpc.status.UNAVAILABLE);
      const cleartext = await grpcRefusalOf(call("health", hostPort(server.url), grpc.credentials.createInsecure(), "Check", { service: "" }));
      expect(cleartext.code).to.be.oneOf([grpc.status.UNAVAILABLE, grpc.status.INTERNAL, grpc.status.DEADLINE_EXCEEDED]);
    });
  });

  describe("mTLS (CORE_TLS_CA set)", () => {
    let stack: TestStack;
    let server: CoreServer;
    let gateway: FastifyInstance;
    let gatewayUrl: string;
    /** What core's interceptors believed about each call, seen from inside core. */
    const seen: { clientAddress: string }[] = [];

    before(async () => {
      stack = await startStack();
      const config = loadConfig({ CORE_TLS_CERT: certs.files.serverCert, CORE_TLS_KEY: certs.files.serverKey, CORE_TLS_CA: certs.files.ca });
      const spy: Interceptor = (next) => (req) => {
        seen.push({ clientAddress: req.contextValues.get(kClientAddress) });
        return next(req);
      };
      server = await startCoreServer({ routes: stack.core.routes, interceptors: [...stack.core.interceptors, spy] }, 0, "127.0.0.1", {
        tls: loadCoreServerTls(config),
      });
      // A gateway dialling core as `serve --role gateway` does: settings -> loadCoreDial -> gRPC over TLS.
      const gatewayConfig = loadConfig({
        CORE_URL: server.url,
        CORE_TLS_CA: certs.files.ca,
        CORE_TLS_CLIENT_CERT: certs.files.clientCert,
        CORE_TLS_CLIENT_KEY: certs.files.clientKey,
      });
      const dial = loadCoreDial(gatewayConfig, gatewayConfig.coreUrl!);
      gateway = await buildGateway({
        clients: createCoreClients(createGrpcTransport({ baseUrl: dial.baseUrl, nodeOptions: dial.nodeOptions }), { gatewayToken: stack.gatewayToken }),
        logger: stack.logs.logger,
        urls: { issuer: TEST_ISSUER, baseUrl: TEST_ISSUER, authUrl: TEST_ISSUER, appUrl: TEST_ISSUER, mcpUrl: TEST_ISSUER },
      });
      await gateway.listen({ port: 0, host: "127.0.0.1" });
      gatewayUrl = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
    });
    after(async () => {
      await gateway?.close();
      await server?.close();
      await stack?.close();
    });

    it("refuses a client without a certificate and one whose certificate another CA signed", async () => {
      const none = await grpcRefusalOf(call("health", hostPort(server.url), grpc.credentials.createSsl(buf(certs.ca)), "Check", { service: "" }));
      expect(none.code).to.equal(grpc.status.UNAVAILABLE);
      const rogueCreds = grpc.credentials.createSsl(buf(certs.ca), buf(certs.rogueClient.key), buf(certs.rogueClient.cert));
      const rogue = await grpcRefusalOf(call("grants", hostPort(server.url), rogueCreds, "GetJwks"));
      expect(rogue.code).to.equal(grpc.status.UNAVAILABLE);
    });

    it("serves a grpc-js client presenting a certificate the CA signed", async () => {
      const creds = grpc.credentials.createSsl(buf(certs.ca), buf(certs.client.key), buf(certs.client.cert));
      expect((await call("health", hostPort(server.url), creds, "Check", { service: "" })).status).to.equal("SERVING");
      const jwks = await call("grants", hostPort(server.url), creds, "GetJwks");
      expect(jwks.jwks_json).to.be.a("string");
    });

    it("a gateway reaches core over mTLS and serves partner requests", async () => {
      const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
      const res = await postToken(gatewayUrl, "grant_type=client_credentials", { authorization: basic(partner.clientId, partner.clientSecret) });
      expect(res.status, await res.clone().text()).to.equal(200);
      expect(((await res.json()) as { scope: string }).scope).to.equal("kyc:read");
      const jwks = await fetch(`${gatewayUrl}/.well-known/agent-jwks.json`);
      expect(jwks.status).to.equal(200);
    });

    it("carries the gateway credential over TLS: core believes the vouched address only with the right token", async () => {
      const dial = loadCoreDial(
        loadConfig({ CORE_TLS_CA: certs.files.ca, CORE_TLS_CLIENT_CERT: certs.files.clientCert, CORE_TLS_CLIENT_KEY: certs.files.clientKey }),
        server.url,
      );
      const transport = createGrpcTransport({ baseUrl: dial.baseUrl, nodeOptions: dial.nodeOptions });
      const requestId = "00000000-0000-4000-8000-000000000001";
      seen.length = 0;
      const honest = createCoreClients(transport, { gatewayToken: stack.gatewayToken });
      await honest.grants.getJwks({}, withRequestId(requestId, "203.0.113.7"));
      // A caller with a client certificate but a guessed gateway token vouches for nothing.
      const forger = createCoreClients(transport, { gatewayToken: "guessed-gateway-token-0000" });
      await forger.grants.getJwks({}, withRequestId(requestId, "198.51.100.9"));
      expect(seen.map((s) => s.clientAddress)).to.deep.equal(["203.0.113.7", ""]);
    });

    it("a gateway without a client certificate cannot reach core", async () => {
      const dial = loadCoreDial(loadConfig({ CORE_TLS_CA: certs.files.ca }), server.url);
      const clients = createCoreClients(createGrpcTransport({ baseUrl: dial.baseUrl, nodeOptions: dial.nodeOptions }), { gatewayToken: stack.gatewayToken });
      const err = await clients.grants.getJwks({}, { timeoutMs: 5_000 }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err, "core answered a caller without a client certificate").to.be.instanceOf(Error);
    });
  });

  describe("`vaultgate serve` split over mTLS, with GATEWAY_TOKEN", () => {
    let coreDir: Awaited<ReturnType<typeof tempDataDir>>;
    let gatewayDir: Awaited<ReturnType<typeof tempDataDir>>;
    let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
    let core: ServiceProcess;
    let gateway: ServiceProcess;
    let coreEnv: Record<string, string>;
    let cliEnv: Record<string, string>;
    const gatewayToken = "split-gateway-token-" + "9f2c7a1e5b3d";

    before(async () => {
      coreDir = await tempDataDir();
      gatewayDir = await tempDataDir();
      scratch = await createScratchDatabase();
      coreEnv = {
        DATA_DIR: coreDir.path,
        ...(scratch ? { DATABASE_URL: scratch.url } : {}),
        CORE_HOST: "127.0.0.1",
        CORE_TLS_CERT: certs.files.serverCert,
        CORE_TLS_KEY: certs.files.serverKey,
        CORE_TLS_CA: certs.files.ca,
        GATEWAY_TOKEN: gatewayToken,
      };
      core = await startServiceProcess("core", coreEnv);
      const clientTls = { CORE_TLS_CA: certs.files.ca, CORE_TLS_CLIENT_CERT: certs.files.clientCert, CORE_TLS_CLIENT_KEY: certs.files.clientKey };
      // The gateway shares nothing with core but its settings: its own DATA_DIR, no database.
      gateway = await startServiceProcess("gateway", { DATA_DIR: gatewayDir.path, CORE_URL: core.coreUrl!, GATEWAY_TOKEN: gatewayToken, ...clientTls });
      cliEnv = { DATA_DIR: coreDir.path, CORE_URL: core.coreUrl!, ...clientTls };
    });
    after(async () => {
      await gateway?.stop();
      await core?.stop();
      await scratch?.drop();
      await coreDir?.remove();
      await gatewayDir?.remove();
    });

    it("core reports TLS with client certificates; the CLI and the gateway work through it", async () => {
      expect(core.coreUrl).to.match(/^https:\/\/127\.0\.0\.1:\d+$/);
      expect(core.output()).to.include("core listening (gRPC, gRPC-Web, Connect over TLS, client certificates required)");
      const created = await runCli(["partner", "create", "--name", "Tls Co", "--entitlements", "kyc:read"], cliEnv);
      expect(created.code, created.stderr).to.equal(0);
      const res = await postToken(gateway.gatewayUrl!, "grant_type=client_credentials", {
        authorization: basic(created.json!.client_id as string, created.json!.client_secret as string),
      });
      expect(res.status).to.equal(200);
    });

    it("the CLI is refused without a client certificate, with a foreign one, or without trusting core's CA, and says which setting", async () => {
      const { CORE_TLS_CLIENT_CERT: _c, CORE_TLS_CLIENT_KEY: _k, ...withoutCert } = cliEnv;
      const cases: [Record<string, string>, RegExp][] = [
        [withoutCert, /CORE_TLS_CLIENT_CERT and CORE_TLS_CLIENT_KEY/],
        [
          { ...cliEnv, CORE_TLS_CLIENT_CERT: certs.files.rogueClientCert, CORE_TLS_CLIENT_KEY: certs.files.rogueClientKey },
          /refuse.* the certificate in CORE_TLS_CLIENT_CERT/,
        ],
        [{ ...cliEnv, CORE_TLS_CA: "" }, /core's certificate at https:\/\/127\.0\.0\.1:\d+ did not verify .*set CORE_TLS_CA/],
      ];
      for (const [env, message] of cases) {
        const refused = await runCli(["partner", "create", "--name", "Refused"], env);
        expect(refused.code, refused.stderr).to.equal(1);
        expect(refused.json).to.equal(undefined);
        expect(refused.stderr).to.match(message);
      }
    });

    it("never logs the gateway credential", () => {
      expect(core.output()).to.not.include(gatewayToken);
      expect(gateway.output()).to.not.include(gatewayToken);
    });

    it("a gateway with no GATEWAY_TOKEN refuses to start and names the variable", async () => {
      const empty = await tempDataDir();
      try {
        const err = await startServiceProcess("gateway", {
          DATA_DIR: empty.path,
          CORE_URL: core.coreUrl!,
          CORE_TLS_CA: certs.files.ca,
          GATEWAY_TOKEN: "",
        }).then(
          async (p) => {
            await p.stop();
            return undefined;
          },
          (e: unknown) => e as Error,
        );
        expect(err?.message).to.match(/service exited with 1/);
        expect(err?.message).to.include("GATEWAY_TOKEN");
      } finally {
        await empty.remove();
      }
    });
  });

  describe("cleartext only on loopback", () => {
    it("refuses a non-loopback CORE_HOST without TLS, naming the variables, unless the operator opts in", () => {
      for (const host of ["0.0.0.0", "::", "10.1.2.3", "core.internal"]) {
        const config = loadConfig({ CORE_HOST: host });
        expect(() => loadCoreServerTls(config), host).to.throw(ConfigError, /CORE_HOST=.*CORE_TLS_CERT and CORE_TLS_KEY.*CORE_ALLOW_CLEARTEXT=true/);
        expect(loadCoreServerTls(loadConfig({ CORE_HOST: host, CORE_ALLOW_CLEARTEXT: "true" }))).to.equal(undefined);
        const tls = loadCoreServerTls(loadConfig({ CORE_HOST: host, CORE_TLS_CERT: certs.files.serverCert, CORE_TLS_KEY: certs.files.serverKey }));
        expect(tls?.cert).to.equal(certs.server.cert);
      }
      for (const host of ["127.0.0.1", "127.8.0.1", "::1", "localhost"]) expect(loadCoreServerTls(loadConfig({ CORE_HOST: host })), host).to.equal(undefined);
      // Core has its own bind address: a public gateway HOST does not move it.
      expect(loadConfig({ HOST: "0.0.0.0" }).coreHost).to.equal("127.0.0.1");
      expect(loadCoreServerTls(loadConfig({ HOST: "0.0.0.0" }))).to.equal(undefined);
    });

    it("refuses to dial a cleartext CORE_URL off loopback unless the operator opts in", () => {
      const remote = "http://core.internal:8081";
      expect(() => loadCoreDial(loadConfig({ CORE_URL: remote }), remote)).to.throw(
        ConfigError,
        /CORE_URL=http:\/\/core\.internal:8081.*CORE_ALLOW_CLEARTEXT=true/,
      );
      expect(loadCoreDial(loadConfig({ CORE_URL: remote, CORE_ALLOW_CLEARTEXT: "true" }), remote).nodeOptions).to.deep.equal({});
      expect(loadCoreDial(loadConfig({}), "http://127.0.0.1:8081").nodeOptions).to.deep.equal({});
      expect(loadCoreDial(loadConfig({}), "http://[::1]:8081").nodeOptions).to.deep.equal({});
      expect(() =>
        loadCoreDial(loadConfig({ CORE_TLS_CLIENT_CERT: certs.files.clientCert, CORE_TLS_CLIENT_KEY: certs.files.clientKey }), "http://127.0.0.1:8081"),
      ).to.throw(ConfigError, /CORE_TLS_CLIENT_CERT is set but CORE_URL=http:\/\/127\.0\.0\.1:8081 is not https/);
      expect(isLoopbackHost("::ffff:127.0.0.1")).to.equal(true);
      expect(isLoopbackHost("127.0.0.1.example.com")).to.equal(false);
    });

    it("`serve --role core` on a non-loopback CORE_HOST without TLS exits with the message before binding", async () => {
      const dir = await tempDataDir();
      try {
        const err = await startServiceProcess("core", { DATA_DIR: dir.path, CORE_HOST: "0.0.0.0" }).then(
          async (p) => {
            await p.stop();
            return undefined;
          },
          (e: unknown) => e as Error,
        );
        expect(err?.message).to.match(/service exited with 1/);
        expect(err?.message).to.match(/CORE_HOST=0\.0\.0\.0 is not a loopback address.*CORE_TLS_CERT and CORE_TLS_KEY.*CORE_ALLOW_CLEARTEXT=true/);
        expect(err?.message).to.not.match(/core listening/);
      } finally {
        await dir.remove();
      }
    });
  });
});
