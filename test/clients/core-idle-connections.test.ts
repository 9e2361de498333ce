import http2 from "node:http2";
import net from "node:net";
import { once } from "node:events";
import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { buildGateway } from "../../gateways/app.js";
import { createCoreClients } from "../../gateways/core-clients.js";
import { coreTransport } from "../../cli/serve.js";
import { startStack, TEST_ISSUER, type TestStack } from "../support/stack.js";

const IDLE_MS = 300;

/**
 * Core closes a connection that has had no open stream for a while (GOAWAY), so idle connections
 * cannot pile up; a stream held open keeps its connection, and a gateway redials transparently.
 */
describe("core's port: idle connections", () => {
  let stack: TestStack;
  let server: CoreServer;
  before(async () => {
    stack = await startStack();
    server = await startCoreServer(stack.core, 0, "127.0.0.1", { idleSessionMs: IDLE_MS });
  });
  after(async () => {
    await server?.close();
    await stack?.close();
  });

  const port = () => Number(new URL(server.url).port);
  const closed = (s: http2.ClientHttp2Session) => (s.closed || s.destroyed ? Promise.resolve() : once(s, "close").then(() => undefined));

  /** A gRPC call on `session` (an empty HealthCheckRequest): the stream, its body already sent. */
  function grpc(session: http2.ClientHttp2Session, method: "Check" | "Watch") {
    const req = session.request({ ":method": "POST", ":path": `/grpc.health.v1.Health/${method}`, "content-type": "application/grpc", te: "trailers" });
    req.on("error", () => {});
    req.resume();
    req.end(Buffer.alloc(5));
    return req;
  }

  it("closes an idle raw HTTP/2 connection with a GOAWAY (NO_ERROR) once its last stream is done", async () => {
    const session = http2.connect(server.url);
    session.on("error", () => {});
    const goaway = once(session, "goaway");
    const check = grpc(session, "Check");
    await once(check, "close");
    const [code] = (await goaway) as [number];
    expect(code).to.equal(http2.constants.NGHTTP2_NO_ERROR);
    await closed(session);
  });

  it("closes a connection that never says anything", async () => {
    const socket = net.connect(port(), "127.0.0.1");
    socket.on("error", () => {});
    socket.resume();
    await once(socket, "close");
  });

  it("keeps a connection while a stream on it is open, however quiet, and closes it once the stream ends", async () => {
    const held = http2.connect(server.url);
    held.on("error", () => {});
    const watch = grpc(held, "Watch");
    await once(watch, "response");
    // A connection opened after it, with no stream: once core closes this one, the held one was as long idle.
    const bare = http2.connect(server.url);
    bare.on("error", () => {});
    await closed(bare);
    expect(held.closed || held.destroyed, "the connection with the open stream").to.equal(false);
    expect(watch.closed).to.equal(false);
    watch.close(http2.constants.NGHTTP2_CANCEL);
    await closed(held);
  });

  it("a gateway keeps answering across core closing its idle connection", async () => {
    const sockets: net.Socket[] = [];
    const createConnection = () => {
      const socket = net.connect(port(), "127.0.0.1");
      sockets.push(socket);
      return socket;
    };
    const transport = coreTransport({ baseUrl: server.url, nodeOptions: { createConnection } }, stack.logs.logger);
    let gateway: FastifyInstance | undefined;
    try {
      gateway = await buildGateway({
        clients: createCoreClients(transport, { gatewayToken: stack.gatewayToken }),
        logger: stack.logs.logger,
        urls: { issuer: TEST_ISSUER, baseUrl: TEST_ISSUER, authUrl: TEST_ISSUER, appUrl: TEST_ISSUER, mcpUrl: TEST_ISSUER },
      });
      await gateway.listen({ port: 0, host: "127.0.0.1" });
      const url = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}/.well-known/agent-jwks.json`;
      for (let round = 1; round <= 3; round++) {
        const res = await fetch(url);
        expect(res.status, `round ${round}`).to.equal(200);
        expect(((await res.json()) as { keys: unknown[] }).keys).to.have.length.greaterThan(0);
        expect(sockets, "one connection per round").to.have.length(round);
        // After core's GOAWAY the transport ends the connection (with an error, "canceled"): its close is awaited.
        await new Promise((resolve) => sockets[round - 1]!.once("close", resolve));
      }
    } finally {
      await gateway?.close();
    }
  });
});
