/**
 * `payments.simulate` through `/mcp/write` next to a stateless MCP SDK server that commits one
 * audit row per call as ours does, then `agent.budget.create` latency (docs/benchmarks.md).
 * Each server runs in its own process (bench/agent-tools-server.ts).
 */
import { performance } from "node:perf_hooks";
import { alternateAtLevels, benchDatabase, benchLogFile, fmt, startBenchChild, load, median, percentile, table, verdict, type BodyCheck } from "./support.js";

const LEVELS = [10, 50];

export async function run(): Promise<void> {
  const db = await benchDatabase();
  const ours = await startBenchChild<{ url: string; parentToken: string; childToken: string; kind: string }>("agent-tools-server", [
    "ours",
    db.url,
    benchLogFile("agent-tools"),
  ]);
  const peer = await startBenchChild<{ url: string }>("agent-tools-server", ["peer", db.url]);
  try {
    const info = ours.info;
    const simulate = JSON.stringify({
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: {
        name: "payments.simulate",
        arguments: {
          counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
          amount_cents: 100,
          currency: "USD",
          idempotency_key: "bench-sim-0001",
        },
      },
    });
    const oursSpec = {
      url: `${info.url}/mcp/write`,
      method: "POST" as const,
      server: ours.pid,
      body: simulate,
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${info.childToken}` },
    };
    const trivial = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "echo", arguments: {} } });
    const peerSpec = {
      url: `${peer.info.url}/mcp`,
      method: "POST" as const,
      server: peer.pid,
      body: trivial,
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
    };

    // The expected shape: a JSON-RPC result whose structured content has the fields of a
    // good simulation (taken from one checked answer).
    const sample = (await (await fetch(oursSpec.url, { method: "POST", headers: oursSpec.headers, body: simulate })).json()) as {
      result?: { structuredContent?: object; isError?: boolean };
      error?: unknown;
    };
    if (!sample.result?.structuredContent || sample.result.isError || sample.error) throw new Error(`payments.simulate failed: ${JSON.stringify(sample)}`);
    const oursCheck: BodyCheck = { jsonrpc: true, keys: Object.keys(sample.result.structuredContent).map((k) => `result.structuredContent.${k}`) };
    const peerCheck: BodyCheck = { jsonrpc: true, keys: ["result.content"] };
    console.log(`expected shape: ${JSON.stringify(oursCheck)}`);

    await load({ ...oursSpec, connections: 10, seconds: 2, check: oursCheck });
    await load({ ...peerSpec, connections: 10, seconds: 2, check: peerCheck });
    const cmp = await alternateAtLevels("payments.simulate via /mcp/write vs MCP SDK stateless server (tool commits an audit row)", LEVELS, (connections) => [
      { name: `vaultgate (${info.kind})`, measure: () => load({ ...oursSpec, connections, seconds: 4, check: oursCheck }) },
      { name: "MCP SDK stateless + audit row", measure: () => load({ ...peerSpec, connections, seconds: 4, check: peerCheck }) },
    ]);
    // The floor every change keeps (at 50 connections, where it was first set), and the
    // goal at equal concurrency (10 and 50) and at each side's peak.
    const at50 = cmp.perLevel.find((l) => l.connections === 50)!.result;
    verdict(
      "tools/call >= 2.0x the SDK server's req/s at 50 connections (floor)",
      `${fmt(at50.ratio, 2)}x (rounds ${at50.ratios.map((r) => fmt(r, 2)).join(", ")})`,
      at50.ratio >= 2 && at50.failures === 0,
    );
    for (const { connections, result } of cmp.perLevel) {
      verdict(
        `tools/call >= 3.0x the SDK server's req/s at ${connections} connections`,
        `${fmt(result.ratio, 2)}x (rounds ${result.ratios.map((r) => fmt(r, 2)).join(", ")})`,
        result.ratio >= 3 && result.failures === 0,
      );
    }
    verdict("tools/call >= 3.0x the SDK server, each at its peak", `${fmt(cmp.peakRatio, 2)}x`, cmp.peakRatio >= 3 && cmp.failures === 0);

    // agent.budget.create: sequential provisioning sagas on one parent vault.
    const latencies: number[] = [];
    for (let i = 0; i < 200; i++) {
      const t = performance.now();
      const res = await fetch(`${info.url}/mcp/treasury`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${info.parentToken}` },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: i,
          method: "agent.budget.create",
          params: {
            purpose: "trip",
            display_name: `bench ${i}`,
            chain_allowlist: ["base", "eth"],
            idempotency_key: `bench-create-${i.toString().padStart(6, "0")}`,
          },
        }),
      });
      const body = (await res.json()) as { error?: unknown; result?: { vault_id?: string } };
      if (res.status !== 200 || body.error || !body.result?.vault_id) throw new Error(`agent.budget.create failed: ${res.status} ${JSON.stringify(body)}`);
      latencies.push(performance.now() - t);
    }
    table([
      {
        measure: "agent.budget.create (3-step saga), sequential",
        n: latencies.length,
        "p50 ms": fmt(median(latencies), 2),
        "p99 ms": fmt(percentile(latencies, 99), 2),
      },
    ]);
  } finally {
    await ours.stop();
    await peer.stop();
    await db.drop();
  }
}
