import http2 from "node:http2";
import { gzipSync } from "node:zlib";
import { expect } from "chai";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { startStack, type TestStack } from "../support/stack.js";

/**
 * A request message core cannot read (not protobuf, a string that is not UTF-8, a compressed
 * frame it was not told how to open) is the caller's mistake: INVALID_ARGUMENT with its reason, never INTERNAL.
 */
describe("core's port: unreadable request messages are the caller's error", () => {
  let stack: TestStack;
  let server: CoreServer;
  let session: http2.ClientHttp2Session;
  before(async () => {
    stack = await startStack();
    server = await startCoreServer(stack.core, 0);
    session = http2.connect(server.url);
  });
  after(async () => {
    session?.close();
    await server?.close();
    await stack?.close();
  });

  type Answer = { status: number; headers: Record<string, string>; body: string };
  const post = (path: string, headers: Record<string, string>, body: Buffer) =>
    new Promise<Answer>((resolve, reject) => {
      const req = session.request({ ":method": "POST", ":path": path, ...headers });
      const answer: Answer = { status: 0, headers: {}, body: "" };
      const chunks: Buffer[] = [];
      const keep = (h: http2.IncomingHttpHeaders) => {
        for (const [k, v] of Object.entries(h)) if (typeof v === "string") answer.headers[k] = v;
      };
      req.on("response", (h) => {
        answer.status = Number(h[":status"]);
        keep(h);
      });
      req.on("trailers", keep);
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("error", reject);
      req.on("close", () => resolve({ ...answer, body: Buffer.concat(chunks).toString("latin1") }));
      req.end(body);
    });
  const envelope = (bytes: number[], flags = 0) => Buffer.concat([Buffer.from([flags, 0, 0, 0, bytes.length]), Buffer.from(bytes)]);
  const ISSUE = "/vaultgate.partners.v1.PartnersService/IssueToken";
  const BAD_UTF8 = [0x0a, 0x02, 0xc3, 0x28];
  const TRUNCATED = [0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f];

  for (const [what, bytes] of [
    ["a string that is not UTF-8", BAD_UTF8],
    ["bytes that are not protobuf", TRUNCATED],
  ] as const) {
    it(`gRPC: ${what} is INVALID_ARGUMENT with reason INVALID_REQUEST`, async () => {
      const res = await post(ISSUE, { "content-type": "application/grpc", te: "trailers" }, envelope([...bytes]));
      expect(res.headers["grpc-status"], decodeURIComponent(res.headers["grpc-message"] ?? "")).to.equal("3");
      expect(res.headers["grpc-status-details-bin"], "the reason travels as a detail").to.be.a("string");
    });

    it(`Connect: ${what} is 400 invalid_argument with reason INVALID_REQUEST`, async () => {
      const res = await post(ISSUE, { "content-type": "application/proto" }, Buffer.from(bytes));
      expect(res.status, res.body).to.equal(400);
      const body = JSON.parse(res.body) as { code: string; details?: { debug?: { reason?: string } }[] };
      expect(body.code).to.equal("invalid_argument");
      expect(body.details?.[0]?.debug?.reason).to.equal("REASON_INVALID_REQUEST");
    });
  }

  // The status of gRPC-Web, and of Connect's streaming protocol, travels in the body's last frame.
  const lastFrame = (body: string) => {
    const bytes = Buffer.from(body, "latin1");
    let at = 0;
    let last = { flags: -1, data: "" };
    while (at + 5 <= bytes.length) {
      const length = bytes.readUInt32BE(at + 1);
      last = { flags: bytes[at]!, data: bytes.subarray(at + 5, at + 5 + length).toString("utf8") };
      at += 5 + length;
    }
    return last;
  };
  const TAIL = "/vaultgate.audit.v1.AuditService/TailRecords";
  const operator = () => ({ authorization: `Bearer ${stack.adminToken}` });

  for (const [what, path, auth] of [
    ["a unary call", ISSUE, () => ({})],
    ["the operator's audit stream", TAIL, operator],
  ] as const) {
    it(`gRPC-Web, ${what}: a string that is not UTF-8 is INVALID_ARGUMENT with its reason`, async () => {
      const res = await post(path, { "content-type": "application/grpc-web+proto", ...auth() }, envelope(BAD_UTF8));
      const trailer = lastFrame(res.body);
      expect(trailer.flags, "a trailer frame").to.equal(0x80);
      expect(trailer.data).to.match(/grpc-status: 3\r\n/);
      expect(trailer.data).to.match(/grpc-status-details-bin: /);
      expect(decodeURIComponent(trailer.data)).to.contain("the request message cannot be read");
    });
  }

  it("Connect streaming, the operator's audit stream: bytes that are not protobuf are invalid_argument with reason INVALID_REQUEST", async () => {
    const res = await post(TAIL, { "content-type": "application/connect+proto", ...operator() }, envelope(TRUNCATED));
    const end = lastFrame(res.body);
    expect(end.flags, "an end-stream frame").to.equal(2);
    const { error } = JSON.parse(end.data) as { error?: { code: string; details?: { debug?: { reason?: string } }[] } };
    expect(error?.code, end.data).to.equal("invalid_argument");
    expect(error?.details?.[0]?.debug?.reason).to.equal("REASON_INVALID_REQUEST");
  });

  it("Connect streaming: a readable request keeps its own answer (an operator credential is still required)", async () => {
    const res = await post(TAIL, { "content-type": "application/connect+proto" }, envelope(TRUNCATED));
    expect(JSON.parse(lastFrame(res.body).data).error.code).to.equal("unauthenticated");
  });

  // Connect says RESOURCE_EXHAUSTED (HTTP 429 on Connect, which invites a retry) of a message over its limit.
  const OVERSIZED = 4 * 1024 * 1024 + 1;
  const tooLarge = /the request message is larger than 4 MiB, the most core reads for this call/;
  // An envelope's header names its length: core refuses it from there, before the rest arrives.
  const oversizedEnvelope = () => {
    const header = Buffer.from([0, 0, 0, 0, 0]);
    header.writeUInt32BE(OVERSIZED, 1);
    return Buffer.concat([header, Buffer.alloc(16)]);
  };

  it("gRPC: a message over 4 MiB is INVALID_ARGUMENT with reason INVALID_REQUEST, not RESOURCE_EXHAUSTED", async () => {
    const res = await post(ISSUE, { "content-type": "application/grpc", te: "trailers" }, oversizedEnvelope());
    const message = decodeURIComponent(res.headers["grpc-message"] ?? "");
    expect(res.headers["grpc-status"], message).to.equal("3");
    expect(message).to.match(tooLarge);
    expect(res.headers["grpc-status-details-bin"], "the reason travels as a detail").to.be.a("string");
  });

  it("Connect: a message over 4 MiB is 400 invalid_argument with reason INVALID_REQUEST, not 429", async () => {
    const res = await post(ISSUE, { "content-type": "application/proto" }, Buffer.alloc(OVERSIZED));
    expect(res.status, res.body).to.equal(400);
    const body = JSON.parse(res.body) as { code: string; message: string; details?: { debug?: { reason?: string } }[] };
    expect(body.code).to.equal("invalid_argument");
    expect(body.message).to.match(tooLarge);
    expect(body.details?.[0]?.debug?.reason).to.equal("REASON_INVALID_REQUEST");
  });

  it("gRPC: a gzip frame that inflates past 4 MiB is INVALID_ARGUMENT with its reason", async () => {
    const packed = gzipSync(Buffer.alloc(OVERSIZED));
    const header = Buffer.from([1, 0, 0, 0, 0]);
    header.writeUInt32BE(packed.length, 1);
    const res = await post(ISSUE, { "content-type": "application/grpc", te: "trailers", "grpc-encoding": "gzip" }, Buffer.concat([header, packed]));
    const message = decodeURIComponent(res.headers["grpc-message"] ?? "");
    expect(res.headers["grpc-status"], message).to.equal("3");
    expect(message).to.match(tooLarge);
  });

  for (const [what, path, auth] of [
    ["a unary call", ISSUE, () => ({})],
    ["the operator's audit stream", TAIL, operator],
  ] as const) {
    it(`gRPC-Web, ${what}: a message over 4 MiB is INVALID_ARGUMENT with its reason`, async () => {
      const res = await post(path, { "content-type": "application/grpc-web+proto", ...auth() }, oversizedEnvelope());
      const trailer = lastFrame(res.body);
      expect(trailer.flags, "a trailer frame").to.equal(0x80);
      expect(trailer.data).to.match(/grpc-status: 3\r\n/);
      expect(decodeURIComponent(trailer.data)).to.match(tooLarge);
    });
  }

  it("gRPC: a compressed frame with no encoding, or that does not decompress, is INVALID_ARGUMENT; an unknown encoding UNIMPLEMENTED", async () => {
    for (const [encoding, status] of [
      [undefined, "3"],
      ["gzip", "3"],
      ["br", "3"],
      // As the gRPC protocol says, naming the encodings core reads.
      ["br-unknown", "12"],
    ] as const) {
      const headers: Record<string, string> = { "content-type": "application/grpc", te: "trailers", ...(encoding ? { "grpc-encoding": encoding } : {}) };
      const res = await post(ISSUE, headers, envelope([0x78], 1));
      expect(res.headers["grpc-status"], `${encoding}: ${decodeURIComponent(res.headers["grpc-message"] ?? "")}`).to.equal(status);
    }
  });
});
