/**
 * `npm run chaos`: a seeded randomized fault campaign against two replicas on one PostgreSQL,
 * checked from the recorded history and the final database. Settings (CHAOS_*) in docs/chaos.md.
 */
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { rm } from "node:fs/promises";
import { makeSecrets, removeDataDir, startDatabase, startReplicas, workDir, type Replica } from "./cluster.js";
import { chainEnv, startChain } from "./chain.js";
import type { ChainRun } from "./chain.js";
import { runChecks } from "./checks.js";
import { History } from "./history.js";
import { Rng } from "./rng.js";
import { runClients, settle } from "./workload.js";
import { createFixtures, startReceiver, type World } from "./world.js";

const seed = process.env.CHAOS_SEED || randomBytes(6).toString("hex");
const seconds = Number(process.env.CHAOS_SECONDS ?? 60);
const owners = Number(process.env.CHAOS_OWNERS ?? 3);
const partners = Number(process.env.CHAOS_PARTNERS ?? 2);

const log = (msg: string) => process.stdout.write(`[chaos ${new Date().toISOString().slice(11, 23)}] ${msg}\n`);

async function main(): Promise<number> {
  log(`seed ${seed} (replay: CHAOS_SEED=${seed} CHAOS_SECONDS=${seconds} npm run chaos)`);
  const rng = new Rng(seed);
  const dir = await workDir();
  log(`work dir ${dir} (replica logs; history on failure; removed when every check passes)`);
  const db = await startDatabase(`chaos_${seed.replace(/[^a-z0-9]/gi, "").slice(0, 20)}_${Date.now()}`.toLowerCase());
  let replicas: Replica[] = [];
  let receiver: World["receiver"] | undefined;
  let chain: ChainRun | undefined;
  let passed = false;
  try {
    const secrets = await makeSecrets((n) => rng.hex(n));
    const crng = rng.fork("chain");
    const started = await startChain(dir, crng);
    const counterparties = Array.from({ length: 5 }, () => `0x${crng.hex(40)}`);
    chain = { ...started, counterparties, stats: {}, heldAtKill: [] };
    log(`chain: anvil ${started.chain.url} (1 s blocks), USDC ${started.chain.usdc}, hot wallet ${started.chain.wallet}`);
    replicas = await startReplicas(2, secrets, db.url, dir, (name) => chainEnv(started.chain, started.keyFile, name));
    log(`replicas ${replicas.map((r) => `${r.name}=${r.url}`).join(" ")}; PostgreSQL restarts ${db.restart ? "on" : "off (CHAOS_DATABASE_URL)"}`);
    const w: World = {
      rng,
      history: new History(),
      replicas,
      db,
      adminToken: secrets.adminToken,
      owners: [],
      partners: [],
      deaths: [],
      issues: [],
      suspensions: [],
      deliveries: [],
      faults: [],
      chain,
      followers: new Map(),
      deadline: 0,
      receiver: undefined as unknown as World["receiver"],
      receiverUrl: "",
      log,
    };
    const rec = await startReceiver(w);
    receiver = w.receiver = rec.server;
    w.receiverUrl = rec.url;
    await createFixtures(w, owners, partners);
    log(`fixtures: ${w.owners.length} agent budgets, ${w.partners.length} partners with treasuries; running ${seconds} s`);
    w.deadline = Date.now() + seconds * 1000;
    await runClients(w);
    log(`faults: ${summarize(w.faults.map((f) => f.kind))}; settling`);
    const { unsettled } = await settle(w);
    const reports = await runChecks(w, unsettled);

    const kinds = summarize(w.history.attempts.map((a) => a.kind));
    const statuses = summarize(w.history.attempts.map((a) => (a.status === 0 ? "no answer" : String(a.status))));
    log(`history: ${w.history.attempts.length} attempts (${kinds}); answers ${statuses}`);
    log(
      `revocations ${w.deaths.length}, suspensions ${w.suspensions.length}, webhooks received ${w.deliveries.length}, audit records followed ${[...w.followers.values()].reduce((n, f) => n + f.seen.length, 0)}`,
    );
    log(
      `chain faults hit: ${
        Object.entries(chain.stats)
          .map(([k, n]) => `${k} ${n}`)
          .join(", ") || "none"
      }`,
    );
    for (const r of reports) log(`${r.violations.length ? "FAIL" : "ok  "} ${r.name}: ${r.checked} checked, ${r.violations.length} violations`);
    const violations = reports.flatMap((r) => r.violations);
    if (violations.length === 0) {
      log(`all checks passed (seed ${seed})`);
      passed = true;
      return 0;
    }
    const file = join(dir, "history.jsonl");
    await w.history.save(file);
    const vfile = join(dir, "violations.json");
    await import("node:fs/promises").then((fs) => fs.writeFile(vfile, JSON.stringify({ seed, seconds, faults: w.faults, violations }, null, 2)));
    for (const v of violations.slice(0, 20)) log(`violation [${v.check}] ${v.message}`);
    if (violations.length > 20) log(`... ${violations.length - 20} more in ${vfile}`);
    log(`FIRST VIOLATION (seed ${seed}): [${violations[0]!.check}] ${violations[0]!.message}`);
    log(`history: ${file}; violations with evidence: ${vfile}; replay: CHAOS_SEED=${seed} CHAOS_SECONDS=${seconds} npm run chaos`);
    return 1;
  } finally {
    await Promise.all(replicas.map((r) => r.stop().catch(() => undefined)));
    await Promise.all(replicas.map((r) => removeDataDir(r).catch(() => undefined)));
    receiver?.close();
    await chain?.chain.close().catch(() => undefined);
    await db.stop().catch(() => undefined);
    // The work dir holds the replicas' logs and, after a violation, the history: kept then.
    if (passed) await rm(dir, { recursive: true, force: true }).catch(() => undefined);
  }
}

function summarize(items: string[]): string {
  const m = new Map<string, number>();
  for (const i of items) m.set(i, (m.get(i) ?? 0) + 1);
  return [...m].map(([k, n]) => `${k} ${n}`).join(", ") || "none";
}

main().then(
  (code) => process.exit(code),
  (err) => {
    log(`campaign error (seed ${seed}): ${err instanceof Error ? err.stack : err}`);
    process.exit(2);
  },
);
