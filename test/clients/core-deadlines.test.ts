import http2 from "node:http2";
import { create, toBinary } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { createConnectTransport, createGrpcTransport } from "@connectrpc/connect-node";
import { expect } from "chai";
import { GrantsService, RegisterClientRequestSchema } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { PartnersService } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { grpcCoreSuite } from "../support/grpc-core.js";
import { coreMetricsListener } from "../support/metrics.js";
import { createPartner } from "../support/partners.js";
import { thrownBy } from "../support/refusals.js";

/** A confidential client's registration: a client row, its audit record and a scrypt hash of its secret. */
const registration = (clientName: string) => ({
  clientName,
  redirectUris: ["http://127.0.0.1:9/callback"],
  grantTypes: ["authorization_code", "refresh_token"],
  responseTypes: ["code"],
  tokenEndpointAuthMethod: "client_secret_post",
  scope: "accounts:read",
});

/**
 * A caller's deadline that is already spent when its call would start (zero, or passed while the
 * request was still arriving) gets DeadlineExceeded from core on its real port, and nothing is run.
 */
describe("core refuses calls whose deadline is spent (core on its real port)", () => {
  const suite = grpcCoreSuite();
  let metrics: Awaited<ReturnType<typeof coreMetricsListener>>;
  before(async () => {
    metrics = await coreMetricsListener();
  });
  after(() => metrics?.close());

  const derivations = async () => (await metrics.scrape()).value("vaultgate_secret_derivations_total", {}) ?? 0;
  const db = () => suite.stack.core.db;
  const registrations = async () => Number((await db()("audit_records").where({ action: "oauth.client.register" }).count<{ n: number }[]>("* as n"))[0]!.n);
  const issuances = async (clientId: string) => db()("audit_records").where({ action: "partner.token.issue", actor: `partner:${clientId}` });

  /** Runs `call`, which must fail DeadlineExceeded, and says what it left behind. */
  async function refusedLeavingNothing(call: () => Promise<unknown>) {
    const before = { audit: await registrations(), derived: await derivations() };
    const err = (await thrownBy(call)) as ConnectError;
    expect(err, String(err)).to.be.instanceOf(ConnectError);
    expect(Code[err.code], err.rawMessage).to.equal("DeadlineExceeded");
    return { audit: (await registrations()) - before.audit, derived: (await derivations()) - before.derived };
  }

  const protocols: [string, () => Transport, Record<string, string>][] = [
    ["gRPC, grpc-timeout: 0m", () => createGrpcTransport({ baseUrl: suite.core.server.url }), { "grpc-timeout": "0m" }],
    ["Connect, connect-timeout-ms: 0", () => createConnectTransport({ baseUrl: suite.core.server.url, httpVersion: "2" }), { "connect-timeout-ms": "0" }],
  ];
  for (const [name, transport, headers] of protocols) {
    it(`${name}: RegisterClient is DeadlineExceeded, with no client, no audit record and no derivation`, async () => {
      const clientName = `deadline zero ${name}`;
      const grants = createClient(GrantsService, transport());
      const left = await refusedLeavingNothing(() => grants.registerClient(registration(clientName), { headers }));
      expect(left).to.deep.equal({ audit: 0, derived: 0 });
      expect(await db()("oauth_clients").where({ client_name: clientName })).to.have.length(0);
      // The same call with time to run registers the client.
      await grants.registerClient(registration(clientName), { timeoutMs: 30_000 });
      expect(await db()("oauth_clients").where({ client_name: clientName })).to.have.length(1);
    });

    it(`${name}: IssueToken is DeadlineExceeded, with no audit record, no derivation and no token`, async () => {
      const partner = await createPartner(suite.stack);
      const partners = createClient(PartnersService, transport());
      const left = await refusedLeavingNothing(() => partners.issueToken({ clientId: partner.clientId, clientSecret: partner.clientSecret }, { headers }));
      expect(left.derived).to.equal(0);
      expect(await issuances(partner.clientId)).to.have.length(0);
    });
  }

  it("raw gRPC: a deadline that passes while the request message is still arriving runs nothing", async () => {
    const clientName = "deadline passed in transit";
    const message = toBinary(RegisterClientRequestSchema, create(RegisterClientRequestSchema, registration(clientName)));
    const frame = Buffer.alloc(5 + message.length);
    frame.writeUInt32BE(message.length, 1);
    frame.set(message, 5);
    const before = { audit: await registrations(), derived: await derivations() };
    const session = http2.connect(suite.core.server.url);
    try {
      const stream = session.request({
        ":method": "POST",
        ":path": "/vaultgate.grants.v1.GrantsService/RegisterClient",
        "content-type": "application/grpc",
        te: "trailers",
        "grpc-timeout": "20m",
      });
      const answer: http2.IncomingHttpHeaders = {};
      stream.on("response", (h) => Object.assign(answer, h));
      stream.on("trailers", (h) => Object.assign(answer, h));
      stream.resume();
      // The headers (and the deadline) are sent; the message follows well after the deadline.
      await new Promise((r) => setTimeout(r, 200));
      stream.end(frame);
      await new Promise((r) => stream.once("close", r));
      expect(answer["grpc-status"], String(answer["grpc-message"])).to.equal(String(Code.DeadlineExceeded));
    } finally {
      session.close();
    }
    expect(await db()("oauth_clients").where({ client_name: clientName })).to.have.length(0);
    expect({ audit: (await registrations()) - before.audit, derived: (await derivations()) - before.derived }).to.deep.equal({ audit: 0, derived: 0 });
  });
});
