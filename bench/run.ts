/**
 * `npm run bench`: runs every bench/*.bench.ts (or those named) in turn; each exports `run()`
 * and prints PASS/FAIL per target against a peer measured in the same run. Exits non-zero
 * when one failed. Options (BENCH_QUICK ...) are in docs/benchmarks.md.
 */
import { readdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { BenchResults, setBenchResults } from "./results.js";
import { BENCH_EXT, printVerdicts, QUICK, removeBenchLogs, ROUNDS, setCurrentBench, settleBenchPostgres, stopBenchPostgres } from "./support.js";

const here = dirname(fileURLToPath(import.meta.url));
// bench/ through tsx, dist-bench/ bundled: the checkout is the folder above either.
const repo = join(here, "..");
const wanted = process.argv.slice(2);
const ext = BENCH_EXT;
const files = (await readdir(here)).filter((f) => f.endsWith(`.bench${ext}`)).sort();
const unknown = wanted.filter((w) => !files.includes(`${w}.bench${ext}`));
if (unknown.length) throw new Error(`no such bench: ${unknown.join(", ")} (have ${files.map((f) => f.slice(0, -`.bench${ext}`.length)).join(", ")})`);

const results = new BenchResults(
  { wanted, quick: QUICK, rounds: ROUNDS, seconds: process.env.BENCH_SECONDS ? Number(process.env.BENCH_SECONDS) : QUICK ? 2 : null },
  repo,
);
setBenchResults(results);
// Every line a bench prints goes to its record too, so no bench has to report twice.
const print = console.log.bind(console);
console.log = (...args: unknown[]) => {
  results.line(...args);
  print(...args);
};

if (QUICK) console.log("BENCH_QUICK=1: short single rounds, numbers are for development only");
try {
  for (const file of files) {
    const name = file.slice(0, -`.bench${ext}`.length);
    if (wanted.length > 0 && !wanted.includes(name)) continue;
    console.log(`\n### ${name}`);
    await settleBenchPostgres(); // what an earlier bench left to PostgreSQL is not this one's load
    setCurrentBench(name);
    results.begin(name);
    const mod = (await import(pathToFileURL(join(here, file)).href)) as { run(): Promise<void> };
    try {
      await mod.run();
    } catch (err) {
      results.end(err);
      throw err;
    }
    results.end();
  }
} finally {
  await stopBenchPostgres();
  removeBenchLogs();
  const file = results.write(process.env.BENCH_RESULTS_DIR ?? join(repo, "bench-results"));
  print(`\nresults: ${file}`);
}
if (!printVerdicts()) process.exitCode = 1;
