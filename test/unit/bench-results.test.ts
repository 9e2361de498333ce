import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "chai";
import { BenchResults, setBenchResults, type RunRecord } from "../../bench/results.js";
import { table, verdict } from "../../bench/support.js";

const repo = fileURLToPath(new URL("../..", import.meta.url));

/** A run's results file (bench/results.ts): what `npm run bench` leaves behind for each run. */
describe("bench results: one JSON file per run", () => {
  let dir: string;
  const { log, table: printTable } = console;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "bench-results-"));
    console.log = console.table = () => {}; // the benches' printing is for their reader
  });
  afterEach(() => {
    Object.assign(console, { log, table: printTable });
    setBenchResults(undefined);
    rmSync(dir, { recursive: true, force: true });
  });

  it("records each bench's verdicts with their numbers, its tables and lines, with the commit, machine and settings", () => {
    const started = new Date("2026-01-02T03:04:05.678Z");
    const results = new BenchResults({ wanted: ["core-hop", "startup"], quick: true, rounds: 1, seconds: 2 }, repo, started);
    setBenchResults(results);

    results.begin("core-hop");
    results.line("direct transport: %d us", 12.5);
    table([{ concurrency: 1, "us/call": 12.5 }]);
    verdict("in-process hop < 50 us per call", "12.5 us", true);
    results.begin("startup");
    verdict("restart to /readyz 200 < 3000 ms", "3120 ms", false);
    verdict("ratio >= 1.5x", "1.57x (rounds 1.52, 1.61, 1.57)", true);
    const file = results.write(dir, new Date("2026-01-02T03:05:00.000Z"));

    expect(readdirSync(dir)).to.deep.equal(["2026-01-02T03-04-05.678Z.json"]);
    expect(file).to.equal(join(dir, "2026-01-02T03-04-05.678Z.json"));
    const run = JSON.parse(readFileSync(file, "utf8")) as RunRecord;
    expect(run.startedAt).to.equal("2026-01-02T03:04:05.678Z");
    expect(run.finishedAt).to.equal("2026-01-02T03:05:00.000Z");
    expect(run.git.commit).to.equal(execFileSync("git", ["rev-parse", "HEAD"], { cwd: repo, encoding: "utf8" }).trim());
    expect(run.git.dirty).to.be.a("boolean");
    expect(run.machine.cpus).to.equal(cpus().length);
    expect(run.machine.memoryBytes).to.be.above(0);
    expect(run.machine.node).to.equal(process.version);
    expect(run.settings).to.deep.equal({ wanted: ["core-hop", "startup"], quick: true, rounds: 1, seconds: 2 });
    expect(run.passed).to.equal(false);

    expect(run.benches.map((b) => b.name)).to.deep.equal(["core-hop", "startup"]);
    const [hop, startup] = run.benches;
    expect(hop!.lines).to.deep.equal(["direct transport: 12.5 us"]);
    expect(hop!.tables).to.deep.equal([[{ concurrency: 1, "us/call": 12.5 }]]);
    expect(hop!.verdicts).to.deep.equal([{ target: "in-process hop < 50 us per call", measured: "12.5 us", numbers: [12.5], pass: true }]);
    expect(hop!.finishedAt).to.be.a("string");
    expect(startup!.verdicts).to.deep.equal([
      { target: "restart to /readyz 200 < 3000 ms", measured: "3120 ms", numbers: [3120], pass: false },
      { target: "ratio >= 1.5x", measured: "1.57x (rounds 1.52, 1.61, 1.57)", numbers: [1.57, 1.52, 1.61, 1.57], pass: true },
    ]);
  });

  it("keeps a table's rows once, not its printed form as lines, and names the error that ended a bench", () => {
    const results = new BenchResults({ wanted: [], quick: false, rounds: 3, seconds: null }, repo);
    setBenchResults(results);
    // As bench/run.ts does: every console line goes to the record too.
    console.log = (...args: unknown[]) => results.line(...args);
    console.table = function (this: Console, rows: unknown) {
      this.log(`| printed ${JSON.stringify(rows)} |`); // Node's console.table prints through console.log
    };
    results.begin("treasury");
    table([{ round: 1, "p50 ms": 31.2 }]);
    results.end(new Error("bench PostgreSQL is not durable"));
    const run = JSON.parse(readFileSync(results.write(dir), "utf8")) as RunRecord;
    expect(run.benches[0]!.tables).to.deep.equal([[{ round: 1, "p50 ms": 31.2 }]]);
    expect(run.benches[0]!.lines).to.deep.equal([]);
    expect(run.benches[0]!.error).to.equal("bench PostgreSQL is not durable");
    expect(run.passed).to.equal(false);
  });
});
