import { randomUUID } from "node:crypto";
import { create, toBinary, toJsonString } from "@bufbuild/protobuf";
import { expect } from "chai";
import { ExecuteBatchRequestSchema } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";
import { CORE_READ_MAX_BYTES, startCoreServer, type CoreServer } from "../../core/server.js";
import { MAX_IDEMPOTENCY_KEY, MAX_ITEMS, MAX_REFERENCE } from "../../core/treasury/batch-request.js";
import { MAX_PARTNER_ID } from "../../lib/vocabulary.js";
import { startStack, type TestStack } from "../support/stack.js";
import { connectJson } from "../support/connect-json.js";

/** Core's port reads a bounded request from anyone, before any credential is looked at, and the largest valid one fits. */
describe("core's port: request size", () => {
  let stack: TestStack;
  let server: CoreServer;
  before(async () => {
    stack = await startStack();
    server = await startCoreServer(stack.core, 0);
  });
  after(async () => {
    await server?.close();
    await stack?.close();
  });

  const post = (path: string, body: Buffer) => connectJson(server.url, path, body);

  it("refuses a body over the limit as the caller's error (400, not a retryable 429), without a credential, and keeps serving", async () => {
    const padded = Buffer.alloc(CORE_READ_MAX_BYTES + 1024, 0x20);
    padded.write('{"service":""', 0);
    padded.write("}", padded.length - 1);
    const res = await post("/grpc.health.v1.Health/Check", padded);
    expect(res.status).to.equal(400);
    expect(res.body.code).to.equal("invalid_argument");
    const health = await post("/grpc.health.v1.Health/Check", Buffer.from('{"service":""}'));
    expect(health.body.status).to.equal("SERVING");
  });

  it("reads the largest valid request: 1,000 payouts with every field at its longest", async () => {
    const long = (n: number, seed: number) => `${seed}`.padEnd(n, "x");
    const batch = create(ExecuteBatchRequestSchema, {
      accessToken: "not-a-token",
      idempotencyKey: long(MAX_IDEMPOTENCY_KEY, 0),
      payerEntityId: randomUUID(),
      items: Array.from({ length: MAX_ITEMS }, (_, i) => ({
        executionId: long(MAX_PARTNER_ID, i),
        payoutId: long(MAX_PARTNER_ID, -i - 1),
        recipientUserId: randomUUID(),
        amountCents: BigInt(Number.MAX_SAFE_INTEGER),
        currency: "EUR",
        reference: "💶".repeat(MAX_REFERENCE),
      })),
    });
    const json = Buffer.from(toJsonString(ExecuteBatchRequestSchema, batch));
    expect(json.length).to.be.below(CORE_READ_MAX_BYTES);
    expect(toBinary(ExecuteBatchRequestSchema, batch).length).to.be.below(json.length);
    // Read and judged: the token is refused, not the size.
    const res = await post("/vaultgate.treasury.v1.TreasuryService/ExecuteBatch", json);
    expect(res.body.code, JSON.stringify(res.body)).to.equal("unauthenticated");
  });
});
