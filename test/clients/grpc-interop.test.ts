import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { fileURLToPath } from "node:url";
import { expect } from "chai";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { startStack, uniqueSlug, type TestStack } from "../support/stack.js";
import { expectGrpcRefused } from "../support/refusals.js";

const run = promisify(execFile);
const protoDir = fileURLToPath(new URL("../../proto", import.meta.url));
const root = fileURLToPath(new URL("../..", import.meta.url));

type Unary = (req: object, md: grpc.Metadata, cb: (err: grpc.ServiceError | null, res: Record<string, unknown>) => void) => void;

/** Core over h2c with clients that know nothing of Connect: grpc-js + proto-loader, and buf curl. */
describe("core gRPC interop", () => {
  let stack: TestStack;
  let server: CoreServer;
  let partners: grpc.Client & Record<string, Unary>;
  let health: grpc.Client & Record<string, Unary>;

  before(async () => {
    stack = await startStack();
    server = await startCoreServer(stack.core, 0);
    const definition = protoLoader.loadSync(["vaultgate/partners/v1/partners.proto", "grpc/health/v1/health.proto"], {
      includeDirs: [protoDir],
      keepCase: true,
      longs: String,
      enums: String,
      defaults: true,
    });
    const loaded = grpc.loadPackageDefinition(definition) as unknown as {
      vaultgate: { partners: { v1: { PartnersService: grpc.ServiceClientConstructor } } };
      grpc: { health: { v1: { Health: grpc.ServiceClientConstructor } } };
    };
    const address = server.url.replace("http://", "");
    partners = new loaded.vaultgate.partners.v1.PartnersService(address, grpc.credentials.createInsecure()) as never;
    health = new loaded.grpc.health.v1.Health(address, grpc.credentials.createInsecure()) as never;
  });
  after(async () => {
    partners?.close();
    health?.close();
    await server?.close();
    await stack?.close();
  });

  const call = (client: Record<string, Unary>, method: string, req: object, md = new grpc.Metadata()) =>
    new Promise<Record<string, unknown>>((resolve, reject) => client[method]!(req, md, (err, res) => (err ? reject(err) : resolve(res))));

  const admin = () => {
    const md = new grpc.Metadata();
    md.set("authorization", `Bearer ${stack.adminToken}`);
    return md;
  };

  it("answers the standard health check", async () => {
    const res = await call(health, "Check", { service: "" });
    expect(res.status).to.equal("SERVING");
  });

  it("answers each readiness check by name; an unknown service is NOT_FOUND, as the health protocol says", async () => {
    expect((await call(health, "Check", { service: "vaultgate.database" })).status).to.equal("SERVING");
    for (const service of ["vaultgate.nope", "vaultgate.", "nope", "vaultgate.constructor"]) {
      await expectGrpcRefused(call(health, "Check", { service }), grpc.status.NOT_FOUND, /^unknown service$/);
    }
  });

  it("List answers every readiness check and the overall status", async () => {
    const res = (await call(health, "List", {})) as { statuses: Record<string, { status: string }> };
    const names = ["database", "migrations", "signing_key", "audit", "settlement"].map((n) => `vaultgate.${n}`);
    expect(Object.keys(res.statuses).sort()).to.deep.equal(["", "vaultgate", ...names].sort());
    for (const [name, s] of Object.entries(res.statuses)) expect(s.status, name).to.equal("SERVING");
  });

  it("Watch sends the current status at once and keeps the call open; an unknown service is SERVICE_UNKNOWN, not an error", async () => {
    type Watcher = grpc.ClientReadableStream<{ status: string }>;
    const watch = health as unknown as { Watch(req: object): Watcher };
    for (const [service, first] of [
      ["", "SERVING"],
      ["vaultgate.database", "SERVING"],
      ["vaultgate.nope", "SERVICE_UNKNOWN"],
    ]) {
      const stream = watch.Watch({ service });
      const ended = new Promise<grpc.ServiceError | "ended">((resolve) => {
        stream.on("error", resolve);
        stream.on("end", () => resolve("ended"));
      });
      const message = await new Promise<{ status: string }>((resolve) => stream.once("data", resolve));
      expect(message.status, service).to.equal(first);
      // Still open after the first message: only the caller's cancel ends it.
      stream.cancel();
      const end = await ended;
      expect(end === "ended" ? "ended" : grpc.status[end.code], service).to.equal("CANCELLED");
    }
  });

  it("a core that stops ends Watch with UNAVAILABLE, so the caller watches again elsewhere", async () => {
    const stopping = await startCoreServer(stack.core, 0);
    const Health = health.constructor as new (address: string, creds: grpc.ChannelCredentials) => grpc.Client;
    const client = new Health(stopping.url.replace("http://", ""), grpc.credentials.createInsecure()) as unknown as {
      Watch(req: object): grpc.ClientReadableStream<{ status: string }>;
      close(): void;
    };
    const stream = client.Watch({ service: "" });
    const ended = new Promise<grpc.ServiceError>((resolve) => stream.on("error", resolve));
    expect((await new Promise<{ status: string }>((resolve) => stream.once("data", resolve))).status).to.equal("SERVING");
    await stopping.close();
    expect(grpc.status[(await ended).code]).to.equal("UNAVAILABLE");
    client.close();
  });

  it("runs admin RPCs and token issuance for a stock grpc-js client", async () => {
    const slug = uniqueSlug();
    const created = await call(partners, "CreatePartner", { name: "Interop", slug }, admin());
    const partner = created.partner as { client_id: string; status: string; entitlements: string[] };
    expect(partner.client_id).to.match(new RegExp(`^gpc_${slug}_[0-9a-f]{8}$`));
    expect(partner.status).to.equal("PARTNER_STATUS_ACTIVE");
    const token = await call(partners, "IssueToken", { client_id: partner.client_id, client_secret: created.client_secret, scope: "kyc:read" });
    expect(token.token_type).to.equal("Bearer");
    expect(token.scope).to.equal("kyc:read");
    expect(String(token.expires_in)).to.equal("3600");
  });

  it("refuses admin RPCs without the operator credential, with a gRPC status", async () => {
    const err = await expectGrpcRefused(
      call(partners, "CreatePartner", { name: "x", slug: uniqueSlug() }),
      grpc.status.UNAUTHENTICATED,
      /^operator credential required$/,
    );
    // The domain reason travels as a standard google.rpc.Status detail.
    expect(err.metadata.get("grpc-status-details-bin")).to.have.length(1);
  });

  it("reads the operator credential whatever the case of its scheme and the spaces after it, and nothing else as it", async () => {
    for (const header of [`bearer ${stack.adminToken}`, `BEARER  ${stack.adminToken}`, `Bearer   ${stack.adminToken}`]) {
      const md = new grpc.Metadata();
      md.set("authorization", header);
      expect((await call(partners, "ListPartners", {}, md)).partners, header.slice(0, 8)).to.be.an("array");
    }
    for (const header of [`Basic ${stack.adminToken}`, `Bearer${stack.adminToken}`, `Bearer ${stack.adminToken.slice(1)}`, `Bearer ${stack.adminToken} x`]) {
      const md = new grpc.Metadata();
      md.set("authorization", header);
      await expectGrpcRefused(call(partners, "ListPartners", {}, md), grpc.status.UNAUTHENTICATED, /^operator credential required$/);
    }
  });

  it("is callable with buf curl over h2c using the repository's proto schema", async () => {
    const { stdout } = await run(
      "npx",
      [
        "buf",
        "curl",
        "--http2-prior-knowledge",
        "--protocol",
        "grpc",
        "--schema",
        "proto",
        "--data",
        '{"service":""}',
        `${server.url}/grpc.health.v1.Health/Check`,
      ],
      { cwd: root },
    );
    expect(JSON.parse(stdout)).to.deep.equal({ status: "SERVING" });
  });
});
