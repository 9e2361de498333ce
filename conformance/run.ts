/**
 * Runs the official MCP conformance suite against the three MCP endpoints of a real
 * `vaultgate serve` and compares outcomes with conformance/baseline.json (docs/reference/agent-tools.md).
 * The suite cannot send headers, so a loopback proxy adds the bearer and forwards all else as sent.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, rmSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { runCli, startServiceProcess, type ServiceProcess } from "../test/support/process.js";

const ENDPOINTS = ["/mcp/read", "/mcp/write", "/mcp/treasury"];
/** Every agent scope, so no scenario meets insufficient_scope. */
const SCOPES = "accounts:read,payments:initiate,payments:simulate,audit:stream,agent:budget:create";
/** One endpoint's whole suite run; the suite itself takes seconds. */
const RUN_TIMEOUT_MS = 10 * 60_000;

type Outcome = "pass" | "warn" | "fail";
interface Check {
  id: string;
  status: string;
  errorMessage?: string;
  details?: unknown;
}
interface ScenarioResult {
  outcome: Outcome;
  checks: Check[];
}

const { values } = parseArgs({ options: { node: { type: "string" }, suite: { type: "string" } } });
if (!values.node || !values.suite) {
  console.error("usage: tsx conformance/run.ts --node <node 22 binary> --suite <@modelcontextprotocol/conformance dist/index.js>");
  process.exit(2);
}
const node22 = values.node;
const suiteBin = values.suite;
const baselinePath = fileURLToPath(new URL("./baseline.json", import.meta.url));

const work = await mkdtemp(join(tmpdir(), "vaultgate-mcp-conformance-"));
let service: ServiceProcess | undefined;
let suiteChild: ChildProcess | undefined;
let proxy: http.Server | undefined;
let cleaned = false;
async function cleanup() {
  if (cleaned) return;
  cleaned = true;
  suiteChild?.kill("SIGTERM");
  await service?.stop().catch(() => undefined);
  proxy?.closeAllConnections();
  await new Promise((resolve) => (proxy ? proxy.close(resolve) : resolve(undefined)));
  if (process.env.MCP_CONFORMANCE_KEEP) console.log(`kept ${work}`);
  else await rm(work, { recursive: true, force: true });
}
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => void cleanup().finally(() => process.exit(130)));
}
// Last resort (a crash past the handlers below): leave no process or data behind.
process.once("exit", () => {
  if (cleaned) return;
  suiteChild?.kill("SIGKILL");
  service?.child.kill("SIGKILL");
  if (!process.env.MCP_CONFORMANCE_KEEP) rmSync(work, { recursive: true, force: true });
});

let code = 1;
try {
  code = await main();
} catch (err) {
  console.error(err instanceof Error ? err.stack : err);
  if (service) console.error(`--- service output (tail)\n${service.output().slice(-4000)}`);
} finally {
  await cleanup();
}
process.exit(code);

async function main(): Promise<number> {
  const baseline = await loadBaseline();

  // The proxy listens first: its address is the service's MCP_URL.
  let upstream: URL | undefined;
  let token = "";
  proxy = http.createServer((req, res) => {
    if (!upstream) return void res.writeHead(503).end();
    const headers = { ...req.headers };
    headers.authorization ??= `Bearer ${token}`;
    const forward = http.request({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(res);
    });
    forward.on("error", (err) => {
      if (!res.headersSent) res.writeHead(502);
      res.end(String(err));
    });
    req.pipe(forward);
  });
  await new Promise<void>((resolve) => proxy!.listen(0, "127.0.0.1", resolve));
  const publicUrl = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;

  const env = { DATA_DIR: join(work, "data"), DATABASE_URL: "", MCP_URL: publicUrl };
  service = await startServiceProcess("all", env);
  upstream = new URL(service.gatewayUrl!);
  const cli = { ...env, CORE_URL: service.coreUrl! };

  const user = await runCli(["user", "create", "--email", "mcp-conformance@example.com"], cli);
  if (user.code !== 0 || !user.json) throw new Error(`user create failed: ${user.stderr}`);
  const grant = await runCli(
    ["grant", "issue", "--user", String(user.json.user_id), "--vault", String(user.json.vault_id), "--scopes", SCOPES, "--step-up"],
    cli,
  );
  if (grant.code !== 0 || typeof grant.json?.access_token !== "string") throw new Error(`grant issue failed: ${grant.stderr}`);
  token = grant.json.access_token;
  console.log(`vaultgate at ${upstream.origin}, suite talks to ${publicUrl} (adds the grant's bearer)`);

  const results = new Map<string, Map<string, ScenarioResult>>();
  for (const path of ENDPOINTS) results.set(path, await runSuite(`${publicUrl}${path}`, join(work, "results", path.split("/").at(-1)!)));

  return report(results, baseline);
}

async function loadBaseline(): Promise<Map<string, string>> {
  const raw = JSON.parse(await readFile(baselinePath, "utf8")) as Record<string, unknown>;
  const baseline = new Map<string, string>();
  for (const [id, reason] of Object.entries(raw)) {
    if (id.startsWith("$")) continue; // "$comment"
    if (typeof reason !== "string" || reason.trim() === "") throw new Error(`baseline entry ${id} needs a one-line reason`);
    baseline.set(id, reason);
  }
  return baseline;
}

/** Runs the suite's active scenarios against one URL; each scenario's checks come from its checks.json. */
async function runSuite(url: string, outDir: string): Promise<Map<string, ScenarioResult>> {
  const logPath = `${outDir}.log`;
  await mkdir(outDir, { recursive: true });
  const log = createWriteStream(logPath);
  let stdout = "";
  const exit = await new Promise<number | null>((resolve, reject) => {
    const child = spawn(node22, [suiteBin, "server", "--url", url, "--output-dir", outDir], { stdio: ["ignore", "pipe", "pipe"] });
    suiteChild = child;
    const timer = setTimeout(() => child.kill("SIGTERM"), RUN_TIMEOUT_MS);
    child.stdout.on("data", (c: Buffer) => {
      stdout += c.toString();
      log.write(c);
    });
    child.stderr.on("data", (c: Buffer) => log.write(c));
    child.once("error", reject);
    child.once("exit", (code) => {
      clearTimeout(timer);
      suiteChild = undefined;
      resolve(code);
    });
  });
  await new Promise((resolve) => log.end(resolve));
  const ran = [...stdout.matchAll(/^=== Running scenario: (\S+) ===$/gm)].map((m) => m[1]!);
  if (ran.length === 0) throw new Error(`the suite ran no scenario against ${url} (exit ${exit}):\n${(await readFile(logPath, "utf8")).slice(-4000)}`);

  const dirs = await readdir(outDir).catch(() => [] as string[]);
  const results = new Map<string, ScenarioResult>();
  for (const scenario of ran) {
    // <output-dir>/server-<scenario>-<ISO timestamp with - for : and .>/checks.json
    const dir = dirs.find((d) => d.startsWith(`server-${scenario}-`) && /^\d{4}-\d{2}-\d{2}T[\d-]+Z$/.test(d.slice(`server-${scenario}-`.length)));
    const checks: Check[] = dir
      ? (JSON.parse(await readFile(join(outDir, dir, "checks.json"), "utf8")) as Check[])
      : [{ id: scenario, status: "FAILURE", errorMessage: `no results: the scenario did not finish (see ${logPath})` }];
    const outcome: Outcome = checks.some((c) => c.status === "FAILURE") ? "fail" : checks.some((c) => c.status === "WARNING") ? "warn" : "pass";
    results.set(scenario, { outcome, checks });
  }
  return results;
}

function report(results: Map<string, Map<string, ScenarioResult>>, baseline: Map<string, string>): number {
  const scenarios = [...new Set([...results.values()].flatMap((r) => [...r.keys()]))];
  const problems: string[] = [];
  const width = Math.max(...scenarios.map((s) => s.length));
  const mark: Record<Outcome, string> = { pass: "pass", warn: "WARN", fail: "FAIL" };

  console.log(`\nMCP conformance (${ENDPOINTS.join(", ")}):`);
  console.log(`  ${"scenario".padEnd(width)}  ${ENDPOINTS.map((e) => e.split("/").at(-1)!.padEnd(8)).join(" ")}  baseline`);
  let passed = 0;
  let expected = 0;
  for (const scenario of scenarios) {
    const reason = baseline.get(scenario);
    const cells = ENDPOINTS.map((path) => {
      const r = results.get(path)!.get(scenario);
      if (!r) return "-";
      if (r.outcome === "pass") {
        passed++;
        if (reason !== undefined) problems.push(`${scenario} on ${path} passes but is in the baseline ("${reason}"): remove it from conformance/baseline.json`);
      } else if (reason !== undefined) {
        expected++;
      } else {
        const why = r.checks
          .filter((c) => c.status === "FAILURE" || c.status === "WARNING")
          .map((c) => `    ${c.status} ${c.id}: ${c.errorMessage ?? JSON.stringify(c.details ?? {}).slice(0, 500)}`)
          .join("\n");
        problems.push(`${scenario} on ${path}: ${r.outcome === "fail" ? "fails" : "warns"} and is not in the baseline\n${why}`);
      }
      return mark[r.outcome];
    });
    console.log(`  ${scenario.padEnd(width)}  ${cells.map((c) => c.padEnd(8)).join(" ")}  ${reason ?? ""}`);
  }
  for (const id of baseline.keys()) {
    if (!scenarios.includes(id)) problems.push(`${id} is in the baseline but the suite ran no such scenario: remove it from conformance/baseline.json`);
  }

  console.log(`\nmcp-conformance: ${passed} passed, ${expected} expected failures (baseline), ${problems.length} problems`);
  for (const p of problems) console.error(`  ✗ ${p}`);
  return problems.length === 0 ? 0 : 1;
}
