import net from "node:net";
import type { AddressInfo } from "node:net";
import { expect } from "chai";
import type { Hex } from "viem";
import { startAnvil, type Anvil } from "../support/anvil.js";
import { createScratchDatabase } from "../support/db.js";
import { evmRailServiceEnv } from "../support/evm-rail.js";
import { startServiceProcess, tempDataDir, type ServiceProcess } from "../support/process.js";

const USDC = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48";

/**
 * A node that refuses its first connection (so core starts, not ready) and then accepts
 * every connection and never answers, the way a node behind a dropping firewall does.
 */
async function hangingNode(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  let seen = 0;
  const server = net.createServer((s) => {
    if (seen++ === 0) {
      s.destroy();
      return;
    }
    sockets.add(s);
    s.on("error", () => {});
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** `vaultgate serve --role all` with a chain on the evm rail says where its gateway listens. */
describe("vaultgate serve --role all with an evm chain (real process)", function () {
  this.timeout(120_000);
  let dir: Awaited<ReturnType<typeof tempDataDir>>;
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  let service: ServiceProcess | undefined;
  let anvil: Anvil | undefined;
  let node: Awaited<ReturnType<typeof hangingNode>> | undefined;

  beforeEach(async () => {
    dir = await tempDataDir();
    scratch = await createScratchDatabase();
  });
  afterEach(async () => {
    // The node goes first: a call still waiting on it would hold the process until its timeout.
    await node?.close();
    node = undefined;
    await service?.stop();
    service = undefined;
    await scratch?.drop();
    await dir?.remove();
    await anvil?.stop();
    anvil = undefined;
  });

  const env = (rpcUrl: string, extra: Record<string, string> = {}, usdc: Hex = USDC) => ({ ...evmRailServiceEnv(dir.path, scratch, rpcUrl, usdc), ...extra });

  it("prints its ready line on a node that answers, and the gateway answers", async () => {
    anvil = await startAnvil();
    service = await startServiceProcess("all", env(anvil.url, {}, await anvil.deployUsdc()));
    expect(service.output()).to.include('"msg":"Vaultgate is ready"');
    const res = await fetch(`${service.gatewayUrl}/readyz`);
    expect(res.status).to.equal(200);
  });

  it("prints its not-ready line at once when the node hangs, and /readyz names settlement without waiting on the node", async () => {
    node = await hangingNode();
    // The longest RPC timeout allowed: a readiness check that waited on the node would hold the line for minutes.
    service = await startServiceProcess("all", env(node.url, { CHAIN_BASE_RPC_TIMEOUT_MS: "120000" }));
    expect(service.output()).to.include("Vaultgate started but is not ready: settlement failing");
    const res = await fetch(`${service.gatewayUrl}/readyz`);
    expect(res.status).to.equal(503);
    expect(((await res.json()) as { failing: string[] }).failing).to.deep.equal(["settlement"]);
  });

  describe("stopping with work in flight", () => {
    async function onHangingNode(extra: Record<string, string>) {
      node = await hangingNode();
      service = await startServiceProcess("all", env(node.url, { CHAIN_BASE_RPC_TIMEOUT_MS: "120000", ...extra }));
      // /readyz starts a background look at the node, which now connects and waits.
      await fetch(`${service.gatewayUrl}/readyz`);
      return service;
    }
    /** A client still sending its body: the gateway's close waits for that request. */
    async function slowUpload(s: ServiceProcess): Promise<net.Socket> {
      const u = new URL(s.gatewayUrl!);
      const sock = net.connect(Number(u.port), u.hostname);
      sock.on("error", () => {});
      await new Promise((r) => sock.once("connect", r));
      sock.write(
        "POST /oauth2/token HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 1000\r\n\r\ngrant_type=",
      );
      await new Promise((r) => setTimeout(r, 300));
      return sock;
    }

    it("exits with status 0 when its own work is done, though a look at the node still waits", async () => {
      const s = await onHangingNode({});
      await new Promise((r) => setTimeout(r, 300));
      const started = Date.now();
      expect(await s.stop()).to.equal(0);
      expect(Date.now() - started).to.be.below(10_000);
      expect(s.output()).to.include('"msg":"stopped"');
    });

    it("exits with status 1 once SHUTDOWN_GRACE_SECONDS is over while a request is in flight", async () => {
      const s = await onHangingNode({ SHUTDOWN_GRACE_SECONDS: "2" });
      const sock = await slowUpload(s);
      const started = Date.now();
      expect(await s.stop()).to.equal(1);
      expect(Date.now() - started).to.be.within(1_500, 15_000);
      expect(s.output()).to.include("stopped before in-flight work finished");
      sock.destroy();
    });

    it("exits at once on a second signal", async () => {
      const s = await onHangingNode({ SHUTDOWN_GRACE_SECONDS: "3600" });
      const sock = await slowUpload(s);
      const code = s.stop();
      await new Promise((r) => setTimeout(r, 500));
      s.child.kill("SIGTERM");
      expect(await code).to.equal(1);
      expect(s.output()).to.include('"graceSeconds":3600');
      sock.destroy();
    });
  });
});
