import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { expect } from "chai";
import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { AuditService } from "../../gen/vaultgate/audit/v1/audit_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { createScratchDatabase } from "../support/db.js";
import { runCli, startServiceProcess, tempDataDir } from "../support/process.js";
import { expectRefused } from "../support/refusals.js";

const messages = (output: string) =>
  output
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => (JSON.parse(l) as { msg: string }).msg);

/** SIGTERM as an orchestrator sends it, against real processes. */
describe("vaultgate serve: stopping (real processes)", function () {
  this.timeout(120_000);

  it("a core with an open audit tail stops cleanly: the tail ends UNAVAILABLE, the process exits 0", async () => {
    const dir = await tempDataDir();
    const scratch = await createScratchDatabase();
    const env = { DATA_DIR: dir.path, ...(scratch ? { DATABASE_URL: scratch.url } : {}) };
    const core = await startServiceProcess("core", { ...env, SHUTDOWN_GRACE_SECONDS: "5" });
    try {
      const created = await runCli(["partner", "create", "--name", "Tail Co"], { ...env, CORE_URL: core.coreUrl! });
      expect(created.code, created.stderr).to.equal(0);
      const admin = readFileSync(`${dir.path}/admin-token`, "utf8").trim();
      const audit = createClient(AuditService, createGrpcTransport({ baseUrl: core.coreUrl! }));
      const tail = audit.tailRecords({ since: "0" }, { headers: { authorization: `Bearer ${admin}` } })[Symbol.asyncIterator]();
      // The first record proves the stream is open on core before the signal.
      expect((await tail.next()).done).to.equal(false);
      const drained = (async () => {
        while (!(await tail.next()).done);
      })();
      const refused = expectRefused(drained, Reason.UNAVAILABLE, /shutting down/);
      expect(await core.stop("SIGTERM"), core.output()).to.equal(0);
      const refusal = await refused;
      expect(refusal.detail.retryAfterSeconds).to.be.greaterThan(0);
      expect(messages(core.output()).slice(-2), core.output()).to.deep.equal(["shutting down", "stopped"]);
    } finally {
      await core.stop("SIGKILL");
      await scratch?.drop();
      await dir.remove();
    }
  });

  it("a request in flight when SIGTERM arrives is answered before the process exits 0", async () => {
    const dir = await tempDataDir();
    const service = await startServiceProcess("all", { DATA_DIR: dir.path });
    const socket = connect(Number(new URL(service.gatewayUrl!).port), "127.0.0.1");
    let received = "";
    socket.on("data", (chunk: Buffer) => (received += chunk.toString()));
    const until = async (done: () => boolean) => {
      while (!done()) await new Promise((r) => setTimeout(r, 20));
    };
    try {
      const body = "grant_type=client_credentials&client_id=gpc_nobody_00000000&client_secret=gps_wrong";
      // "100 Continue" proves the server has read the headers: the request is in flight.
      socket.write(
        `POST /api/partner/oauth/token HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`,
      );
      await until(() => received.includes("100 Continue"));
      const exited = new Promise<number | null>((resolve) => service.child.once("exit", resolve));
      service.child.kill("SIGTERM");
      await until(() => messages(service.output()).includes("shutting down"));
      // write, not end: a client's half-close would abort its own request.
      socket.write(body);
      // No second signal: the drain must end by itself once the answer is out.
      expect(await exited, service.output()).to.equal(0);
      expect(received, service.output()).to.match(/HTTP\/1\.1 401 Unauthorized/);
      expect(received).to.include(`"error":"invalid_client"`);
      expect(messages(service.output()).slice(-3), service.output()).to.deep.equal(["shutting down", "request", "stopped"]);
    } finally {
      socket.destroy();
      await service.stop("SIGKILL");
      await dir.remove();
    }
  });

  it("a request arriving on a busy connection during the drain gets its surface's 503, then the process exits 0", async () => {
    const dir = await tempDataDir();
    const service = await startServiceProcess("all", { DATA_DIR: dir.path });
    const port = Number(new URL(service.gatewayUrl!).port);
    const held = "grant_type=client_credentials&client_id=gpc_nobody_00000000&client_secret=gps_wrong";
    const next: Record<string, string> = {
      partner: `GET /api/partner/users/${"0".repeat(8)}-0000-4000-8000-${"0".repeat(12)}/kyc HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`,
      jsonrpc: `POST /mcp/read HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{"jsonrpc":"2.0","id":7,"method":"ping"}`,
      oauth: `POST /oauth2/token HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 0\r\n\r\n`,
      page: `GET /signin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`,
    };
    const sockets = Object.keys(next).map(() => connect(port, "127.0.0.1"));
    const received = sockets.map(() => "");
    sockets.forEach((s, i) => {
      s.on("data", (chunk: Buffer) => {
        received[i] += chunk.toString();
      });
    });
    const until = async (done: () => boolean) => {
      while (!done()) await new Promise((r) => setTimeout(r, 20));
    };
    try {
      // Each connection holds a request in flight, so the drain cannot close it as idle.
      for (const s of sockets) {
        s.write(
          `POST /api/partner/oauth/token HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: ${held.length}\r\nExpect: 100-continue\r\n\r\n`,
        );
      }
      await until(() => received.every((r) => r.includes("100 Continue")));
      const exited = new Promise<number | null>((resolve) => service.child.once("exit", resolve));
      service.child.kill("SIGTERM");
      await until(() => messages(service.output()).includes("shutting down"));
      // The held body, then the next request pipelined behind it on the same connection.
      Object.values(next).forEach((request, i) => {
        sockets[i]!.write(held + request);
      });
      expect(await exited, service.output()).to.equal(0);
      const second = received.map((r) => r.slice(r.indexOf("HTTP/1.1 401")).slice(1));
      const answers = second.map((r) => {
        const at = r.indexOf("HTTP/1.1 ");
        const [head, body] = r.slice(at).split("\r\n\r\n") as [string, string];
        return { status: head.split(" ")[1], retryAfter: /\r\nretry-after: (\d+)/i.exec(head)?.[1], close: /\r\nconnection: close/i.test(head), body };
      });
      expect(
        answers.map((a) => [a.status, a.retryAfter, a.close]),
        received.join("\n---\n"),
      ).to.deep.equal([
        ["503", "1", true],
        ["503", "1", true],
        ["503", "1", true],
        ["503", "1", true],
      ]);
      expect(answers[0]!.body).to.include(`"code":"temporarily_unavailable"`);
      expect(answers[1]!.body).to.include(`"code":-32603`).and.include(`"reason_id":"temporarily_unavailable"`);
      expect(answers[2]!.body).to.include(`"error":"temporarily_unavailable"`);
      expect(answers[3]!.body).to.match(/^(?:[0-9a-f]+\r\n)?<!doctype html>/i);
    } finally {
      for (const s of sockets) s.destroy();
      await service.stop("SIGKILL");
      await dir.remove();
    }
  });
});
