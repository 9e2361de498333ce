import { spawn, execFile, type ChildProcess } from "node:child_process";
import { createWriteStream, type WriteStream } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { Interceptor } from "@connectrpc/connect";
import { newP256PrivateKey } from "../lib/crypto.js";
import pg from "pg";
import { createCoreClients, type CoreClients } from "../gateways/core-clients.js";
import { freePort } from "../test/support/ports.js";

const root = fileURLToPath(new URL("..", import.meta.url));
const bin = join(root, "bin/vaultgate.mjs");
const pgScript = join(root, "scripts/pg-throwaway.sh");
const run = promisify(execFile);

/** The database: a throwaway cluster this run owns (so it can restart it), or CHAOS_DATABASE_URL. */
export interface Database {
  url: string;
  /** Restarts the PostgreSQL server; undefined when the cluster is not ours. */
  restart?: () => Promise<void>;
  stop(): Promise<void>;
}

export async function startDatabase(dbName: string): Promise<Database> {
  const given = process.env.CHAOS_DATABASE_URL;
  if (given) {
    // Someone else's server: make a scratch database on it and never restart it.
    const url = await createScratch(given, dbName);
    return { url, stop: () => dropScratch(given, dbName) };
  }
  const port = Number(process.env.CHAOS_PG_PORT ?? 55470);
  const dir = process.env.CHAOS_PG_DIR ?? `/tmp/vaultgate-chaos-pg-${port}`;
  const { stdout } = await run("bash", [pgScript, "start", dir, String(port)], { maxBuffer: 1 << 20 });
  const base = stdout.trim().split("\n").at(-1)!;
  const url = await createScratch(base, dbName);
  const asOwner = (args: string[]) =>
    (process.getuid?.() === 0 ? ["runuser", ["-u", "postgres", "--", ...args]] : [args[0]!, args.slice(1)]) as [string, string[]];
  const pgCtl = async () => {
    const { stdout: dirs } = await run("bash", ["-c", "ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1"]);
    return join(dirs.trim(), "pg_ctl");
  };
  return {
    url,
    async restart() {
      // -l: the restarted server must not inherit (and hold open) our pipe as its log.
      const [cmd, args] = asOwner([await pgCtl(), "-D", join(dir, "data"), "-l", join(dir, "postgres.log"), "-m", "fast", "-w", "-t", "30", "restart"]);
      await new Promise<void>((resolve, reject) => {
        const child = spawn(cmd, args, { stdio: "ignore" });
        child.once("error", reject);
        child.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`pg_ctl restart exited ${code}`))));
      });
    },
    async stop() {
      await dropScratch(base, dbName).catch(() => undefined);
      if (process.env.CHAOS_KEEP_PG) return;
      await run("bash", [pgScript, "stop", dir]).catch(() => undefined);
      // The cluster is ours unless CHAOS_PG_DIR named it: leave nothing behind.
      if (!process.env.CHAOS_PG_DIR) await rm(dir, { recursive: true, force: true });
    },
  };
}

async function createScratch(base: string, name: string): Promise<string> {
  const client = new pg.Client({ connectionString: base });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE "${name}"`);
  } finally {
    await client.end();
  }
  const url = new URL(base);
  url.pathname = `/${name}`;
  return url.toString();
}

async function dropScratch(base: string, name: string): Promise<void> {
  if (process.env.CHAOS_KEEP_DB) return;
  const client = new pg.Client({ connectionString: base });
  await client.connect();
  try {
    await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  } finally {
    await client.end();
  }
}

/** Secrets every replica shares, so a token minted by one is accepted by the other. */
export interface SharedSecrets {
  signingKey: string;
  adminToken: string;
  gatewayToken: string;
  /** The keys outside the database every replica must share (webhook secrets, sign-in codes). */
  webhookSecretKey: string;
  signinCodeKey: string;
}

export async function makeSecrets(hex: (n: number) => string): Promise<SharedSecrets> {
  return {
    signingKey: JSON.stringify(newP256PrivateKey().export({ format: "jwk" })),
    adminToken: `chaos-admin-${hex(32)}`,
    gatewayToken: `chaos-gateway-${hex(32)}`,
    webhookSecretKey: hex(64),
    signinCodeKey: hex(64),
  };
}

/** One `vaultgate serve --role all` process on fixed ports, restartable after kill -9. */
export class Replica {
  child: ChildProcess | undefined;
  readonly url: string;
  readonly coreUrl: string;
  private log: WriteStream;
  starts = 0;
  up = false;
  get dataDir(): string {
    return this.env.DATA_DIR!;
  }

  constructor(
    readonly name: string,
    private readonly port: number,
    private readonly corePort: number,
    private readonly env: Record<string, string>,
    logFile: string,
  ) {
    this.url = `http://127.0.0.1:${port}`;
    this.coreUrl = `http://127.0.0.1:${corePort}`;
    this.log = createWriteStream(logFile, { flags: "a" });
  }

  async start(): Promise<void> {
    this.starts++;
    const child = spawn(process.execPath, [bin, "serve", "--role", "all"], {
      env: { ...process.env, ...this.env, PORT: String(this.port), CORE_PORT: String(this.corePort), HOST: "127.0.0.1" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.child = child;
    let out = "";
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${this.name} did not start in 60 s`)), 60_000);
      child.stdout!.on("data", (chunk: Buffer) => {
        this.log.write(chunk);
        if (this.up) return;
        out += chunk.toString();
        if (/"gateway":"http/.test(out)) {
          this.up = true;
          out = "";
          clearTimeout(timer);
          resolve();
        }
      });
      child.stderr!.on("data", (chunk: Buffer) => this.log.write(chunk));
      child.once("exit", (code, signal) => {
        this.up = false;
        this.log.write(`\n[chaos] ${this.name} exited code=${code} signal=${signal}\n`);
        clearTimeout(timer);
        reject(new Error(`${this.name} exited (${code ?? signal}) while starting`));
      });
    });
  }

  /** kill -9: no shutdown hooks, in-flight transactions are cut. */
  async kill9(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;
    this.up = false;
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
    this.up = false;
  }
}

export async function startReplicas(
  n: number,
  secrets: SharedSecrets,
  databaseUrl: string,
  workDir: string,
  extraEnv: (name: string) => Record<string, string> = () => ({}),
): Promise<Replica[]> {
  const replicas: Replica[] = [];
  const ports = await Promise.all(Array.from({ length: n }, async () => [await freePort(), await freePort()] as const));
  // One public identity for every replica, as behind a load balancer: a token minted by one
  // names the issuer and audience the other expects.
  const publicUrl = `http://127.0.0.1:${ports[0]![0]}`;
  for (let i = 0; i < n; i++) {
    const dataDir = await mkdtemp(join(tmpdir(), `vaultgate-chaos-r${i}-`));
    const env = {
      DATABASE_URL: databaseUrl,
      DATA_DIR: dataDir,
      ADMIN_TOKEN: secrets.adminToken,
      GATEWAY_TOKEN: secrets.gatewayToken,
      SIGNING_KEY: secrets.signingKey,
      WEBHOOK_SECRET_KEY: secrets.webhookSecretKey,
      SIGNIN_CODE_KEY: secrets.signinCodeKey,
      BASE_URL: publicUrl,
      ISSUER: publicUrl,
      MCP_URL: publicUrl,
      AUTH_URL: publicUrl,
      APP_URL: publicUrl,
      LOG_LEVEL: "info",
      DATABASE_POOL_MAX: "10",
      WEBHOOK_POLL_MS: "200",
      WEBHOOK_ALLOW_PRIVATE: "true",
      REGISTRATION_RATE_LIMIT_PER_MINUTE: "1000000",
      PROVISIONING_RATE_LIMIT_PER_MINUTE: "1000000",
      TOKEN_RATE_LIMIT_PER_MINUTE: "1000000",
      PARTNER_RESOURCE_RATE_LIMIT_PER_MINUTE: "1000000",
      ...extraEnv(`r${i}`),
    };
    const r = new Replica(`r${i}`, ports[i]![0], ports[i]![1], env, join(workDir, `replica-${i}.log`));
    replicas.push(r);
  }
  // Migrations run at startup: start the first alone so two never race on them.
  await replicas[0]!.start();
  await Promise.all(replicas.slice(1).map((r) => r.start()));
  return replicas;
}

export function adminClients(replica: Replica, adminToken: string): CoreClients {
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${adminToken}`);
    return next(req);
  };
  return createCoreClients(createGrpcTransport({ baseUrl: replica.coreUrl, interceptors: [auth] }));
}

/** Removes a replica's DATA_DIR (after it stopped): its keys and tokens are of no use to anyone. */
export async function removeDataDir(replica: Replica): Promise<void> {
  await rm(replica.dataDir, { recursive: true, force: true });
}

export async function workDir(): Promise<string> {
  return mkdtemp(join(tmpdir(), "vaultgate-chaos-"));
}
