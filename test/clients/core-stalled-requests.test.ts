import http2 from "node:http2";
import { expect } from "chai";
import { CORE_MAX_CONCURRENT_STREAMS, startCoreServer, type CoreServer } from "../../core/server.js";
import { REFLECTION_READ_MAX_BYTES } from "../../core/routes.js";
import { startStack, type TestStack } from "../support/stack.js";

/**
 * Core buffers a request message until it is whole, before any credential is read: a caller that
 * stops sending mid-message must not hold that memory for ever, nor open streams without bound.
 */
describe("core's port: stalled requests", () => {
  let stack: TestStack;
  let server: CoreServer;
  let session: http2.ClientHttp2Session;
  before(async () => {
    stack = await startStack();
    server = await startCoreServer(stack.core, 0, "127.0.0.1", { requestTimeoutMs: 1000 });
    session = http2.connect(server.url);
    await new Promise((resolve) => session.once("remoteSettings", resolve));
  });
  after(async () => {
    session?.destroy();
    await server?.close();
    await stack?.close();
  });

  /** A Connect JSON health check; the body is sent whole, or only its first half and then nothing. */
  function check(whole: boolean): Promise<{ status?: number; body: string; rstCode: number }> {
    const body = Buffer.from(`{"service":""${" ".repeat(64 * 1024)}}`);
    const req = session.request({
      ":method": "POST",
      ":path": "/grpc.health.v1.Health/Check",
      "content-type": "application/json",
      "content-length": String(body.length),
    });
    req.on("error", () => {}); // a cancelled stream errors on the client too
    let status: number | undefined;
    let text = "";
    req.on("response", (h) => {
      status = Number(h[":status"]);
    });
    req.setEncoding("utf8");
    req.on("data", (chunk: string) => {
      text += chunk;
    });
    if (whole) req.end(body);
    else req.write(body.subarray(0, body.length / 2));
    return new Promise((resolve) => req.on("close", () => resolve({ status, body: text, rstCode: req.rstCode ?? 0 })));
  }

  it("cancels a request whose message stops arriving, and serves whole ones on the same connection", async () => {
    const [stalled, whole] = await Promise.all([check(false), check(true)]);
    expect(whole.status).to.equal(200);
    expect(JSON.parse(whole.body).status).to.equal("SERVING");
    expect(stalled.status, "no answer was started").to.equal(undefined);
    expect(stalled.rstCode).to.equal(http2.constants.NGHTTP2_CANCEL);
    const after = await check(true);
    expect(JSON.parse(after.body).status).to.equal("SERVING");
  });

  it("limits the streams one connection may have open at once", () => {
    expect(session.remoteSettings.maxConcurrentStreams).to.equal(CORE_MAX_CONCURRENT_STREAMS);
    expect(CORE_MAX_CONCURRENT_STREAMS).to.be.at.most(1000);
  });

  /** A gRPC reflection stream that sends `frames` and then ends or nothing more: the grpc-status it ends with (if any) and its reset code. */
  function reflect(frames: Buffer, end = false): Promise<{ grpcStatus?: string; grpcMessage?: string; rstCode: number }> {
    const req = session.request({
      ":method": "POST",
      ":path": "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
      "content-type": "application/grpc",
      te: "trailers",
    });
    req.on("error", () => {});
    let grpcStatus: string | undefined;
    let grpcMessage: string | undefined;
    req.on("response", (h) => {
      grpcStatus ??= h["grpc-status"] as string | undefined;
      grpcMessage ??= h["grpc-message"] as string | undefined;
    });
    req.on("trailers", (t) => {
      grpcStatus = t["grpc-status"] as string;
      grpcMessage = t["grpc-message"] as string;
    });
    req.resume();
    if (end) req.end(frames);
    else req.write(frames);
    return new Promise((resolve) => req.on("close", () => resolve({ grpcStatus, grpcMessage, rstCode: req.rstCode ?? 0 })));
  }
  const envelope = (length: number, payload: Buffer) =>
    Buffer.concat([Buffer.from([0, length >>> 24, (length >>> 16) & 255, (length >>> 8) & 255, length & 255]), payload]);

  it("cancels a reflection stream that goes silent mid-message", async () => {
    const stalled = await reflect(envelope(1000, Buffer.alloc(10)));
    expect(stalled.rstCode).to.equal(http2.constants.NGHTTP2_CANCEL);
  });

  it("refuses a reflection request larger than a reflection request can be", async () => {
    // ServerReflectionRequest.host (field 1) holding 100 KiB.
    const host = Buffer.alloc(100 * 1024, 0x61);
    const message = Buffer.concat([Buffer.from([0x0a, 0x80, 0x80, 0x06]), host]);
    expect(message.length).to.be.above(REFLECTION_READ_MAX_BYTES);
    const refused = await reflect(envelope(message.length, message), true);
    expect(refused.grpcStatus).to.equal("3"); // INVALID_ARGUMENT, as any request over its limit
    expect(decodeURIComponent(refused.grpcMessage ?? "")).to.equal("the request message is larger than 64 KiB, the most core reads for this call");
  });
});
