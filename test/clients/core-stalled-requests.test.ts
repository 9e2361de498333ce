import http2 from "node:http2";
import { expect } from "chai";
import { CORE_MAX_CONCURRENT_STREAMS, startCoreServer, type CoreServer } from "../../core/server.js";
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
});
