import { fileURLToPath } from "node:url";
import { expect } from "chai";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { startStack, type TestStack } from "../support/stack.js";
import { createPartner } from "../support/partners.js";
import { connectJson } from "../support/connect-json.js";

const protoDir = fileURLToPath(new URL("../../proto", import.meta.url));
const DAY = 24 * 3600_000;
const PATH = "/vaultgate.partners.v1.PartnerResourcesService/SetWebhook";

type Unary = (req: object, md: grpc.Metadata, cb: (err: grpc.ServiceError | null, res: Record<string, unknown>) => void) => void;

/** SetWebhook says until when the secret it replaced still signs, to Connect JSON and grpc-js callers on core's port. */
describe("SetWebhook: the previous secret's end of overlap (core's port)", () => {
  let stack: TestStack;
  let server: CoreServer;
  let resources: grpc.Client & Record<string, Unary>;
  before(async () => {
    stack = await startStack({ webhookPollMs: 0 });
    server = await startCoreServer(stack.core, 0);
    const definition = protoLoader.loadSync(["vaultgate/partners/v1/resources.proto"], { includeDirs: [protoDir], keepCase: true, longs: String });
    const loaded = grpc.loadPackageDefinition(definition) as unknown as {
      vaultgate: { partners: { v1: { PartnerResourcesService: grpc.ServiceClientConstructor } } };
    };
    resources = new loaded.vaultgate.partners.v1.PartnerResourcesService(server.url.replace("http://", ""), grpc.credentials.createInsecure()) as never;
  });
  after(async () => {
    resources?.close();
    await server?.close();
    await stack?.close();
  });

  const call = (body: object) => connectJson(server.url, PATH, JSON.stringify(body), { authorization: `Bearer ${stack.adminToken}` });

  const viaGrpc = (req: object) =>
    new Promise<Record<string, unknown>>((resolve, reject) => {
      const md = new grpc.Metadata();
      md.set("authorization", `Bearer ${stack.adminToken}`);
      resources.SetWebhook!(req, md, (err, res) => (err ? reject(err) : resolve(res)));
    });

  it("Connect JSON: unset on the first secret, 24 hours after a rotation, kept when the same secret is set again, unset once cleared", async () => {
    const start = new Date("2026-05-01T12:00:00.000Z");
    stack.clock.set(start);
    const partner = await createPartner(stack);
    const url = "https://hooks.example/v1";
    const first = await call({ clientId: partner.clientId, url });
    expect(first.status).to.equal(200);
    expect(first.body).to.not.have.property("previousSecretExpiresAt");
    stack.clock.set(new Date(start.getTime() + 60_000));
    const rotated = await call({ clientId: partner.clientId, url });
    expect(rotated.body.previousSecretExpiresAt).to.equal("2026-05-02T12:01:00Z");
    stack.clock.set(new Date(start.getTime() + 3600_000));
    const same = await call({ clientId: partner.clientId, url, secret: rotated.body.secret });
    expect(same.body.previousSecretExpiresAt).to.equal(rotated.body.previousSecretExpiresAt);
    const cleared = await call({ clientId: partner.clientId, url: "" });
    expect(cleared.status).to.equal(200);
    expect(cleared.body).to.not.have.property("previousSecretExpiresAt");
  });

  it("grpc-js: the rotation answers the end as a Timestamp; after the overlap a rotation names only the secret it replaced", async () => {
    const start = new Date("2026-06-01T00:00:00.000Z");
    stack.clock.set(start);
    const partner = await createPartner(stack);
    const url = "https://hooks.example/v2";
    const first = await viaGrpc({ client_id: partner.clientId, url });
    expect(first).to.not.have.property("previous_secret_expires_at");
    const rotated = await viaGrpc({ client_id: partner.clientId, url });
    expect(rotated.previous_secret_expires_at).to.deep.include({ seconds: String((start.getTime() + DAY) / 1000) });
    stack.clock.set(new Date(start.getTime() + 2 * DAY));
    const later = await viaGrpc({ client_id: partner.clientId, url, secret: rotated.secret });
    expect(later).to.not.have.property("previous_secret_expires_at");
  });
});
