/** Servers and helpers a bench runs in processes of their own, logging as shipped. */
import { spawn } from "node:child_process";
import { closeSync, mkdirSync, openSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Logger } from "pino";
import { createLogger, logDestination } from "../cli/logger.js";

const bin = fileURLToPath(new URL("../bin/vaultgate.mjs", import.meta.url));
/** True when this runs from the bundle `npm run bench` makes (scripts/bench.mjs), false through tsx. */
const compiled = import.meta.url.endsWith(".js");
/** The extension of the benches' own files in this form: `.js` bundled, `.ts` through tsx. */
export const BENCH_EXT = compiled ? ".js" : ".ts";

/**
 * The node arguments that start a sibling script of the benches: its bundled .js with
 * plain node under `npm run bench`, its .ts through tsx when the benches run from source.
 */
export function benchScript(name: string): string[] {
  const file = fileURLToPath(new URL(`./${name}${BENCH_EXT}`, import.meta.url));
  return compiled ? [file] : ["--import", "tsx", file];
}

/** A server a bench runs in a process of its own (startBenchChild). */
export interface BenchChild<Info> {
  pid: number;
  /** The JSON line the child printed first. */
  info: Info;
  /** Asks the child to do `op` (outside any measurement) and resolves with its answer. */
  call<T>(op: string, arg?: unknown): Promise<T>;
  stop(): Promise<void>;
}

/**
 * Starts a sibling bench script with an IPC channel and resolves with its first JSON line;
 * the child answers `{ id, op, arg }` messages, so a bench can ask it for fixtures.
 */
export async function startBenchChild<Info>(script: string, args: string[] = []): Promise<BenchChild<Info>> {
  const child = spawn(process.execPath, [...benchScript(script), ...args], { stdio: ["ignore", "pipe", "inherit", "ipc"] });
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  let gone = false;
  child.on("message", (m: { id: number; result?: unknown; error?: string }) => {
    const p = pending.get(m.id);
    pending.delete(m.id);
    if (m.error !== undefined) p?.reject(new Error(`${script}: ${m.error}`));
    else p?.resolve(m.result);
  });
  void exited.then(() => {
    gone = true;
    for (const p of pending.values()) p.reject(new Error(`${script} exited`));
    pending.clear();
  });
  const info = await new Promise<Info>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (c: Buffer) => {
      out += c.toString();
      const line = out.split("\n").find((l) => l.startsWith("{"));
      if (line) resolve(JSON.parse(line) as Info);
    });
    void exited.then(() => reject(new Error(`${script} ${args.join(" ")} exited:\n${out}`)));
  });
  let nextId = 0;
  return {
    pid: child.pid!,
    info,
    call<T>(op: string, arg?: unknown) {
      if (gone) return Promise.reject(new Error(`${script} exited`));
      const id = nextId++;
      return new Promise<T>((resolve, reject) => {
        pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
        child.send({ id, op, arg });
      });
    },
    async stop() {
      child.kill("SIGTERM");
      await exited;
    },
  };
}

/** The child's side of startBenchChild: answers each call with `handlers[op](arg)`. */
export function serveBenchCalls(handlers: Record<string, (arg: never) => Promise<unknown>>): void {
  process.on("message", (m: { id: number; op: string; arg?: unknown }) => {
    const handler = handlers[m.op];
    const answer = handler ? handler(m.arg as never) : Promise.reject(new Error(`unknown call ${m.op}`));
    answer.then(
      (result) => process.send!({ id: m.id, result }),
      (err: unknown) => process.send!({ id: m.id, error: err instanceof Error ? err.message : String(err) }),
    );
  });
}

// ---------------------------------------------------------------------------------------
// Logging as shipped

const LOG_DIR = join(tmpdir(), "vaultgate-bench-logs");

/** A file the bench's servers log to (removed by `removeBenchLogs`). */
export function benchLogFile(name: string): string {
  mkdirSync(LOG_DIR, { recursive: true });
  return join(LOG_DIR, `${name}-${process.pid}-${Date.now()}.log`);
}

/**
 * The production logger (cli/logger.ts: redaction, the service's buffered destination) at
 * `level` (default `info`, the shipped default), writing to a file instead of stdout.
 */
export function benchLogger(name: string, level = "info"): Logger {
  return createLogger(level, logDestination(benchLogFile(name)));
}

export function removeBenchLogs(): void {
  rmSync(LOG_DIR, { recursive: true, force: true });
}

/**
 * `vaultgate serve --role all` as shipped (LOG_LEVEL info unless `env` says otherwise),
 * its stdout and stderr going to a log file; resolves when it reports its addresses.
 */
export async function startService(
  env: Record<string, string>,
  /** Another checkout's bin/vaultgate.mjs (e.g. an older version to compare with). */
  binPath = bin,
): Promise<{ gatewayUrl: string; coreUrl: string; pid: number; stop(): Promise<void> }> {
  const logFile = benchLogFile("serve");
  const fd = openSync(logFile, "w");
  const child = spawn(process.execPath, [binPath, "serve", "--role", "all"], {
    env: { ...process.env, PORT: "0", CORE_PORT: "0", HOST: "127.0.0.1", LOG_LEVEL: "info", ...env },
    stdio: ["ignore", fd, fd],
  });
  closeSync(fd);
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  let exitCode: number | null | undefined;
  void exited.then((c) => (exitCode = c));
  const deadline = Date.now() + 60_000;
  for (;;) {
    const text = readFileSync(logFile, "utf8");
    let gatewayUrl: string | undefined;
    let coreUrl: string | undefined;
    for (const line of text.split("\n")) {
      if (!line.startsWith("{")) continue;
      try {
        const e = JSON.parse(line) as { msg?: string; url?: string; gateway?: string };
        if (e.msg?.startsWith("core listening")) coreUrl = e.url;
        if (e.gateway) gatewayUrl = e.gateway;
      } catch {
        /* partial line */
      }
    }
    if (gatewayUrl && coreUrl) {
      return {
        gatewayUrl,
        coreUrl,
        pid: child.pid!,
        async stop() {
          if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
          await exited;
        },
      };
    }
    if (exitCode !== undefined || Date.now() > deadline) throw new Error(`vaultgate serve did not start:\n${text}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
