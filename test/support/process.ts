import { spawn, execFile, type ChildProcess } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { createScratchDatabase } from "./db.js";

// The real entry point: it runs the compiled dist/ when that is at least as new as every
// source (CI runs `npm ci`, which builds it), else the TypeScript sources through tsx, so
// these processes always run the code in the working tree (VAULTGATE_DEV=1 forces sources).
const bin = fileURLToPath(new URL("../../bin/vaultgate.mjs", import.meta.url));
const runFile = promisify(execFile);

export interface ServiceProcess {
  child: ChildProcess;
  gatewayUrl?: string;
  coreUrl?: string;
  output(): string;
  stop(signal?: NodeJS.Signals): Promise<number | null>;
}

/** Runs `vaultgate serve` as a real process and waits until it reports its URLs. */
export async function startServiceProcess(role: "all" | "core" | "gateway", env: Record<string, string>): Promise<ServiceProcess> {
  // VAULTGATE_PROFILE_DIR: write a V8 CPU profile of each service process (benchmarks).
  const profile = process.env.VAULTGATE_PROFILE_DIR ? ["--cpu-prof", `--cpu-prof-dir=${process.env.VAULTGATE_PROFILE_DIR}`] : [];
  const child = spawn(process.execPath, [...profile, bin, "serve", "--role", role], {
    env: {
      ...process.env,
      PORT: "0",
      CORE_PORT: "0",
      HOST: "127.0.0.1",
      LOG_LEVEL: "info",
      REGISTRATION_RATE_LIMIT_PER_MINUTE: "1000000",
      SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE: "1000000",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const ready = new Promise<{ gatewayUrl?: string; coreUrl?: string }>((resolve, reject) => {
    const timer = setTimeout(() => {
      // Not left running behind the failed test.
      child.kill("SIGKILL");
      reject(new Error(`service did not start:\n${out}`));
    }, 60_000);
    const urls: { gatewayUrl?: string; coreUrl?: string } = {};
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      for (const line of out.split("\n")) {
        if (!line.startsWith("{")) continue;
        try {
          const entry = JSON.parse(line) as { msg?: string; url?: string; gateway?: string };
          if (entry.msg?.startsWith("core listening")) urls.coreUrl = entry.url;
          if (entry.gateway) urls.gatewayUrl = entry.gateway;
        } catch {
          /* partial line */
        }
      }
      const done = role === "core" ? urls.coreUrl : urls.gatewayUrl;
      if (done) {
        clearTimeout(timer);
        resolve(urls);
      }
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", (c: Buffer) => (out += c.toString()));
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`service exited with ${code}:\n${out}`));
    });
  });
  const urls = await ready;
  return {
    child,
    ...urls,
    output: () => out,
    async stop(signal = "SIGTERM") {
      if (child.exitCode === null && child.signalCode === null) child.kill(signal);
      // A process that ignores the signal is not left running behind the test.
      const timer = setTimeout(() => child.kill("SIGKILL"), 45_000);
      return exited.finally(() => clearTimeout(timer));
    },
  };
}

/**
 * Runs a CLI command (stdout is a pipe, so commands print JSON) and returns its exit code,
 * parsed JSON stdout (when stdout is JSON), stdout and stderr. `nodeArgs` go before the script.
 */
export async function runCli(args: string[], env: Record<string, string>, nodeArgs: string[] = []) {
  try {
    const { stdout, stderr } = await runFile(process.execPath, [...nodeArgs, bin, ...args], { env: { ...process.env, ...env } });
    return { code: 0, json: /^\s*[{[]/.test(stdout) ? (JSON.parse(stdout) as Record<string, unknown>) : undefined, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, json: undefined, stdout: e.stdout, stderr: e.stderr };
  }
}

export async function tempDataDir(): Promise<{ path: string; remove(): Promise<void> }> {
  const path = await mkdtemp(join(tmpdir(), "vaultgate-test-"));
  return { path, remove: () => rm(path, { recursive: true, force: true }) };
}

export interface OperatorProcess {
  /** Environment for `runCli` against the running service (DATA_DIR, DATABASE_URL, CORE_URL). */
  env: Record<string, string>;
  service: ServiceProcess;
}

/**
 * Registers mocha hooks that run one `vaultgate serve --role <role>` for the suite, on a
 * scratch Postgres database when TEST_DATABASE_URL is set (else embedded in a temp
 * DATA_DIR), and tear it down after. Read `.env`/`.service` inside tests.
 */
export function useServiceProcess(role: "all" | "core"): OperatorProcess {
  const handle = {} as OperatorProcess;
  let dir: Awaited<ReturnType<typeof tempDataDir>> | undefined;
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  before(async () => {
    dir = await tempDataDir();
    scratch = await createScratchDatabase();
    handle.env = { DATA_DIR: dir.path, ...(scratch ? { DATABASE_URL: scratch.url } : {}) };
    handle.service = await startServiceProcess(role, handle.env);
    handle.env.CORE_URL = handle.service.coreUrl!;
  });
  after(async () => {
    await handle.service?.stop();
    await scratch?.drop();
    await dir?.remove();
  });
  return handle;
}
