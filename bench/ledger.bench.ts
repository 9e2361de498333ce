/**
 * The ledger's costs: payments.initiate against the version before the ledger (BENCH_LEDGER_BASE,
 * built in a temporary worktree), which should show the ledger adds no round trip; and
 * `ledger verify` over a large ledger (docs/benchmarks.md).
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { performance } from "node:perf_hooks";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { Interceptor } from "@connectrpc/connect";
import { createDb } from "../core/db/knex.js";
import { migrateLatest } from "../core/db/migrate.js";
import { createLedgerStore } from "../core/ledger/store.js";
import { createCoreClients } from "../gateways/core-clients.js";
import {
  alternate,
  benchDatabase,
  fmt,
  fundedAgentBudget,
  load,
  median,
  QUICK,
  startService,
  table,
  verdict,
  type BodyCheck,
  type LoadSpec,
} from "./support.js";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const CONNECTIONS = 10;
const INITIATES = QUICK ? 3_000 : 8_000;
const POSTINGS = QUICK ? 200_000 : 1_000_000;
const VAULTS = 1_000;

export async function run(): Promise<void> {
  await initiateBeforeAfter();
  await verifyMillion();
}

/** A checkout of `ref` built into a temporary worktree; returns its bin and a remover. */
function checkout(ref: string): { bin: string; remove(): void } {
  const dir = join(tmpdir(), `vaultgate-bench-base-${process.pid}`);
  rmSync(dir, { recursive: true, force: true });
  execFileSync("git", ["worktree", "add", "--detach", "--force", dir, ref], { cwd: root, stdio: "ignore" });
  symlinkSync(join(root, "node_modules"), join(dir, "node_modules"));
  // The checkout's own build: scripts/build.mjs where it has one, tsc into dist/ before that.
  const build = existsSync(join(dir, "scripts/build.mjs"))
    ? [join(dir, "scripts/build.mjs")]
    : [join(root, "node_modules/typescript/bin/tsc"), "-p", "tsconfig.build.json"];
  execFileSync(process.execPath, build, { cwd: dir, stdio: "inherit" });
  return {
    bin: join(dir, "bin/vaultgate.mjs"),
    remove() {
      execFileSync("git", ["worktree", "remove", "--force", dir], { cwd: root, stdio: "ignore" });
    },
  };
}

function baseRef(): string {
  if (process.env.BENCH_LEDGER_BASE) return process.env.BENCH_LEDGER_BASE;
  const added = execFileSync("git", ["log", "--diff-filter=A", "--format=%H", "--", "core/db/migrations/0020-ledger.ts"], { cwd: root, encoding: "utf8" })
    .trim()
    .split("\n")
    .at(-1);
  if (!added) throw new Error("cannot find the commit that added the ledger; set BENCH_LEDGER_BASE");
  return `${added}^`;
}

interface Side {
  name: string;
  url: string;
  agentToken: string;
  stop(): Promise<void>;
  drop(): Promise<void>;
}

/** `vaultgate serve` from `bin` on a fresh database, with a funded budget and an agent token on it. */
async function side(name: string, bin: string | undefined): Promise<Side> {
  const db = await benchDatabase();
  const adminToken = randomBytes(16).toString("hex");
  const dataDir = join(tmpdir(), `vaultgate-bench-ledger-${name}-${process.pid}`);
  const service = await startService({ DATABASE_URL: db.url, ADMIN_TOKEN: adminToken, DATA_DIR: dataDir, PROVISIONING_LIMIT_PER_MINUTE: "1000000" }, bin);
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${adminToken}`);
    return next(req);
  };
  const admin = createCoreClients(createGrpcTransport({ baseUrl: service.coreUrl, interceptors: [auth] }));
  const { agentToken } = await fundedAgentBudget(admin, service.gatewayUrl, {
    scopes: ["agent:budget:create", "payments:initiate"],
    caps: { amount_cap_cents_per_tx: 100_000, amount_cap_cents_per_day: 1e12, amount_cap_cents_lifetime: 1e12 },
    fundCents: 1_000_000_000_000n,
  });
  return {
    name,
    url: service.gatewayUrl,
    agentToken,
    stop: () => service.stop(),
    async drop() {
      await db.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

async function initiateBeforeAfter(): Promise<void> {
  const ref = baseRef();
  console.log(`building the version before the ledger (${ref}) in a temporary worktree`);
  const base = checkout(ref);
  const sides: Side[] = [];
  try {
    sides.push(await side("without ledger", base.bin), await side("with ledger", undefined));
    let batch = 0;
    const tool = (key: string) =>
      JSON.stringify({
        jsonrpc: "2.0",
        id: 1,
        method: "tools/call",
        params: {
          name: "payments.initiate",
          arguments: {
            counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
            amount_cents: 100,
            currency: "USD",
            idempotency_key: key,
          },
        },
      });
    const check: BodyCheck = { jsonrpc: true, keys: ["result.structuredContent.payment_id", "result.structuredContent.status"] };
    const spec = (s: Side): LoadSpec => {
      const b = ++batch;
      return {
        url: `${s.url}/mcp/write`,
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${s.agentToken}` },
        bodies: Array.from({ length: INITIATES }, (_, i) => tool(`bench-pay-${b}-${i}`)),
        connections: CONNECTIONS,
        check,
      };
    };
    for (const s of sides) await load(spec(s)); // warm-up
    const r = await alternate(`payments.initiate (tools/call), ${CONNECTIONS} connections: with the ledger vs without`, [
      { name: "with ledger", measure: () => load(spec(sides[1]!)) },
      { name: "without ledger", measure: () => load(spec(sides[0]!)) },
    ]);
    console.log(`payments.initiate req/s before the ledger ${fmt(r.sides[1]!.rps, 0)}, after ${fmt(r.sides[0]!.rps, 0)}`);
    verdict(
      "payments.initiate with the ledger >= 0.90x without (no extra round trip)",
      `${r.ratio.toFixed(2)}x (rounds ${r.ratios.map((x) => x.toFixed(2)).join(", ")})`,
      r.ratio >= 0.9 && r.failures === 0,
    );
  } finally {
    for (const s of sides) {
      await s.stop();
      await s.drop();
    }
    base.remove();
  }
}

async function verifyMillion(): Promise<void> {
  const scratch = await benchDatabase();
  const db = createDb({ url: scratch.url, poolMax: 2 });
  try {
    await migrateLatest(db);
    console.log(`seeding ${POSTINGS} postings over ${VAULTS} vaults`);
    await db.raw(
      `INSERT INTO users (id, email, created_at) SELECT md5('u' || g)::uuid, 'ledger-' || g || '@example.test', now() FROM generate_series(1, ?) g`,
      [VAULTS],
    );
    await db.raw(`INSERT INTO vaults (id, owner_user_id, created_at) SELECT md5('v' || g)::uuid, md5('u' || g)::uuid, now() FROM generate_series(1, ?) g`, [
      VAULTS,
    ]);
    const transactions = POSTINGS / 2;
    await db.raw(
      `INSERT INTO ledger_transactions (id, kind, reference, created_at) SELECT md5('t' || g)::uuid, 'vault.fund', 'bench', now() FROM generate_series(1, ?) g`,
      [transactions],
    );
    await db.raw(
      `INSERT INTO ledger_postings (transaction_id, account_id, amount_cents, currency, created_at)
       SELECT md5('t' || g)::uuid, a.account_id, a.amount, 'USD', now()
         FROM generate_series(1, ?) g,
              LATERAL (VALUES (ledger_account_id('vault', md5('v' || (1 + g % ?))::uuid::text, 'USD'), 100 + g % 7),
                              (ledger_account_id('external', 'funding', 'USD'), -(100 + g % 7))) a (account_id, amount)`,
      [transactions, VAULTS],
    );
    await db.raw(
      `UPDATE vaults v SET balance_cents = s.total
         FROM (SELECT account_id, sum(amount_cents) AS total FROM ledger_postings GROUP BY account_id) s
        WHERE s.account_id = ledger_account_id('vault', v.id::text, v.currency)`,
    );
    await db.raw("VACUUM ANALYZE ledger_postings");
    await db.raw("VACUUM ANALYZE ledger_transactions");
    const ledger = createLedgerStore(db);
    const times: number[] = [];
    let postings = 0;
    for (let i = 0; i < 3; i++) {
      const started = performance.now();
      const report = await ledger.verify();
      times.push((performance.now() - started) / 1000);
      postings = report.postings;
      if (report.discrepancies.length > 0) throw new Error(`the seeded ledger does not verify: ${JSON.stringify(report.discrepancies)}`);
    }
    table(times.map((t, i) => ({ run: i + 1, postings, seconds: fmt(t, 2) })));
    verdict(
      `ledger verify over ${postings} postings < 10 s`,
      `${fmt(median(times), 2)} s (median of 3)`,
      median(times) < 10 && postings >= (QUICK ? 0 : 1_000_000),
    );
  } finally {
    await db.destroy();
    await scratch.drop();
  }
}
