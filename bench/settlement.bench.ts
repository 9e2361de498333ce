/**
 * Payments settling on a local anvil chain: a large run checked on chain and in the ledger,
 * then accept latency on the evm rail against the sandbox rail, which shows the chain is never
 * on the request path (docs/benchmarks.md).
 */
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import type { Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import pg from "pg";
import { createCoreClients, type CoreClients } from "../gateways/core-clients.js";
import { startBenchChain } from "./settlement-chain.js";
import {
  alternate,
  benchDatabase,
  comparisonRounds,
  fmt,
  load,
  median,
  percentile,
  QUICK,
  startService,
  table,
  verdict,
  type BodyCheck,
  type LoadSpec,
} from "./support.js";

const PAYMENTS = Number(process.env.BENCH_SETTLEMENT_PAYMENTS ?? (QUICK ? 100 : 1_000));
const VAULTS = Number(process.env.BENCH_SETTLEMENT_VAULTS ?? (QUICK ? 10 : 50));
const CONNECTIONS = 10;
/** payments.initiate calls per side and round in the latency comparison. */
const INITIATES = QUICK ? 500 : 1_000;
const ROUNDS = comparisonRounds(5);
const ANVIL_PORT = 55_488;
/** Longest wait for every payment to complete. */
const SETTLE_TIMEOUT_MS = 15 * 60_000;

/** A vault made as an agent makes one (agent.budget.create), funded, and an agent token on it. */
async function vault(admin: CoreClients, gatewayUrl: string, i: number): Promise<string> {
  const scopes = ["agent:budget:create", "payments:initiate"];
  const user = await admin.partners.createUser({ email: `bench-settle-${i}-${randomBytes(6).toString("hex")}@example.test` });
  const parent = (await admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes, stepUp: true })).token!.accessToken;
  const body = await call(gatewayUrl, "/mcp/treasury", parent, "agent.budget.create", {
    purpose: "custom",
    display_name: `bench ${i}`,
    amount_cap_cents_per_tx: 100_000,
    amount_cap_cents_per_day: 1e12,
    amount_cap_cents_lifetime: 1e12,
    chain_allowlist: ["eth", "base"],
    idempotency_key: "bench-budget-0001",
  });
  const vaultId = (body.result as { vault_id: string }).vault_id;
  await admin.budgets.fundVault({ vaultId, amountCents: 1_000_000_000n });
  return (await admin.grants.issueGrant({ userId: user.userId, vaultId, scopes, stepUp: false })).token!.accessToken;
}

async function call(gatewayUrl: string, path: string, token: string, name: string, args: unknown): Promise<{ result?: Record<string, unknown> }> {
  const res = await fetch(`${gatewayUrl}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${token}` },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/call", params: { name, arguments: args } }),
  });
  const body = (await res.json()) as { result?: { structuredContent?: Record<string, unknown>; isError?: boolean }; error?: unknown };
  if (!body.result || body.result.isError) throw new Error(`${name} failed: ${JSON.stringify(body)}`);
  return { result: body.result.structuredContent ?? (body.result as Record<string, unknown>) };
}

const payment = (to: string, chain: string, cents: number, key: string) => ({
  counterparty: { address: to, chain, token: "USDC" },
  amount_cents: cents,
  currency: "USD",
  idempotency_key: key,
});

export async function run(): Promise<void> {
  const db = await benchDatabase();
  const adminToken = randomBytes(16).toString("hex");
  const dataDir = join(tmpdir(), `vaultgate-bench-settlement-${process.pid}`);
  const chain = await startBenchChain(ANVIL_PORT, "eth", dataDir);
  let service: Awaited<ReturnType<typeof startService>> | undefined;
  const sql = new pg.Client({ connectionString: db.url });
  try {
    console.log(`anvil on ${chain.url}, --block-time 1; USDC ${chain.usdc}; eth hot wallet ${chain.wallet} funded with 1,000,000 USDC`);
    service = await startService({
      DATABASE_URL: db.url,
      ADMIN_TOKEN: adminToken,
      DATA_DIR: dataDir,
      PROVISIONING_RATE_LIMIT_PER_MINUTE: "1000000",
      ...chain.env("eth"),
    });
    const auth: Interceptor = (next) => (req) => {
      req.header.set("authorization", `Bearer ${adminToken}`);
      return next(req);
    };
    const admin = createCoreClients(createGrpcTransport({ baseUrl: service.coreUrl, interceptors: [auth] }));
    const tokens: string[] = [];
    for (let i = 0; i < VAULTS; i++) tokens.push(await vault(admin, service.gatewayUrl, i));
    await sql.connect();

    // 1. Settle PAYMENTS payments, each to an address of its own, amounts 1..PAYMENTS cents.
    const recipients = Array.from({ length: PAYMENTS }, () => `0x${randomBytes(20).toString("hex")}`);
    const walletBefore = await chain.usdcBalance(chain.wallet);
    const started = performance.now();
    let next = 0;
    const ids = new Map<string, { to: string; cents: number }>();
    await Promise.all(
      Array.from({ length: CONNECTIONS }, async () => {
        for (let i = next++; i < PAYMENTS; i = next++) {
          const cents = i + 1;
          const { result } = await call(
            service!.gatewayUrl,
            "/mcp/write",
            tokens[i % VAULTS]!,
            "payments.initiate",
            payment(recipients[i]!, "eth", cents, `bench-settle-${i}`),
          );
          ids.set(result!.payment_id as string, { to: recipients[i]!, cents });
        }
      }),
    );
    const acceptedSeconds = (performance.now() - started) / 1000;
    console.log(`${PAYMENTS} payments accepted from ${VAULTS} vaults in ${fmt(acceptedSeconds)} s (${CONNECTIONS} connections); waiting for completion`);
    for (;;) {
      const { rows } = await sql.query(`SELECT status, count(*)::int AS n FROM settlement_payments WHERE chain = 'eth' GROUP BY status`);
      const by = Object.fromEntries(rows.map((r: { status: string; n: number }) => [r.status, r.n]));
      if ((by.completed ?? 0) + (by.failed ?? 0) >= PAYMENTS) break;
      if (performance.now() - started > SETTLE_TIMEOUT_MS) throw new Error(`payments not settled after ${SETTLE_TIMEOUT_MS / 1000} s: ${JSON.stringify(by)}`);
      await new Promise((r) => setTimeout(r, 250));
    }
    const { rows } = await sql.query(
      `SELECT payment_id, status, recipient, amount_cents::int AS cents,
              extract(epoch FROM completed_at - created_at) * 1000 AS ms,
              extract(epoch FROM max(completed_at) OVER () - min(created_at) OVER ()) AS span
         FROM settlement_payments WHERE chain = 'eth'`,
    );
    const done = rows as { payment_id: string; status: string; recipient: string; cents: number; ms: number; span: number }[];
    const completed = done.filter((r) => r.status === "completed");
    const latencies = completed.map((r) => Number(r.ms));
    const span = Number(done[0]?.span ?? 0);

    // Each counterparty paid exactly once: its on-chain balance is exactly its one amount.
    let wrong = 0;
    for (const r of done) {
      const want = ids.get(r.payment_id);
      const have = await chain.usdcBalance(r.recipient);
      if (!want || want.to !== r.recipient.toLowerCase() || have !== BigInt(want.cents) * 10_000n) wrong++;
    }
    const outOnChain = walletBefore - (await chain.usdcBalance(chain.wallet));
    const ledger = await sql.query(
      `SELECT COALESCE(sum(p.amount_cents), 0)::bigint AS cents FROM ledger_postings p JOIN ledger_accounts a ON a.id = p.account_id
        WHERE a.kind = 'external' AND a.owner = $1`,
      [`hot_wallet:eth:${chain.wallet.toLowerCase()}`],
    );
    const ledgerUnits = BigInt((ledger.rows[0] as { cents: string }).cents) * 10_000n;
    const ledgerUnitsAbs = ledgerUnits < 0n ? -ledgerUnits : ledgerUnits;
    const sent = BigInt((PAYMENTS * (PAYMENTS + 1)) / 2) * 10_000n;
    const discrepancies = (await admin.audit.verifyLedger({})).discrepancies.length;
    table([
      {
        measure: `${PAYMENTS} payments, ${VAULTS} vaults, eth on anvil`,
        completed: completed.length,
        "accept->completed p50 ms": fmt(median(latencies)),
        "p99 ms": fmt(percentile(latencies, 99)),
        "settled/s": fmt(completed.length / span),
        "wrong balances": wrong,
        "ledger = chain":
          ledgerUnitsAbs === outOnChain && outOnChain === sent ? "yes" : `no (ledger ${ledgerUnitsAbs}, chain ${outOnChain}, sent ${sent} units)`,
        "verify discrepancies": discrepancies,
      },
    ]);
    verdict(
      `${PAYMENTS} payments all completed, each counterparty paid exactly once`,
      `${completed.length} completed, ${wrong} wrong on-chain balance(s)`,
      completed.length === PAYMENTS && wrong === 0,
    );
    verdict(
      "ledger and chain equal (hot wallet account, on-chain outflow, ledger verify)",
      `ledger ${ledgerUnitsAbs}, chain ${outOnChain} USDC units, ${discrepancies} discrepancies`,
      ledgerUnitsAbs === outOnChain && outOnChain === sent && discrepancies === 0,
    );
    console.log(
      `accept -> completed p50 ${fmt(median(latencies))} ms, p99 ${fmt(percentile(latencies, 99))} ms; ${fmt(completed.length / span)} payments settled/s`,
    );

    // 2. Accept latency, evm rail (eth) vs sandbox rail (base), same service and vault.
    let batch = 0;
    const check: BodyCheck = { jsonrpc: true, keys: ["result.structuredContent.payment_id", "result.structuredContent.status"] };
    const spec = (rail: string): LoadSpec => {
      const b = ++batch;
      const to = `0x${randomBytes(20).toString("hex")}`;
      return {
        url: `${service!.gatewayUrl}/mcp/write`,
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${tokens[0]!}` },
        bodies: Array.from({ length: INITIATES }, (_, i) =>
          JSON.stringify({
            jsonrpc: "2.0",
            id: 1,
            method: "tools/call",
            params: { name: "payments.initiate", arguments: payment(to, rail, 1, `bench-lat-${b}-${i}`) },
          }),
        ),
        connections: CONNECTIONS,
        check,
      };
    };
    await load(spec("eth")); // warm-up
    await load(spec("base"));
    const r = await alternate(
      `payments.initiate accept, ${CONNECTIONS} connections: evm rail (eth) vs sandbox rail (base)`,
      [
        { name: "evm rail", measure: () => load(spec("eth")) },
        { name: "sandbox rail", measure: () => load(spec("base")) },
      ],
      ROUNDS,
    );
    const [evm, sandbox] = r.sides as [(typeof r.sides)[0], (typeof r.sides)[0]];
    const ratios = evm.rounds.map((x, i) => x.p50 / sandbox.rounds[i]!.p50);
    const ratio = median(ratios);
    console.log(`accept p50: evm ${fmt(evm.p50)} ms, sandbox ${fmt(sandbox.p50)} ms; p99: evm ${fmt(evm.p99)} ms, sandbox ${fmt(sandbox.p99)} ms`);
    verdict(
      "payments.initiate accept p50, evm rail <= 1.1x sandbox rail (median of rounds)",
      `${ratio.toFixed(2)}x (rounds ${ratios.map((x) => x.toFixed(2)).join(", ")})`,
      ratio <= 1.1 && r.failures === 0,
    );
  } finally {
    await sql.end().catch(() => {});
    await service?.stop();
    await chain.stop();
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
