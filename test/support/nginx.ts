import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createConnection } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./ports.js";

/** Debian's nginx: CI installs it (.ci/run); it is never downloaded. */
export const NGINX = "/usr/sbin/nginx";

/**
 * Call from a mocha `before(function () {...})`: skips the suite with a visible reason
 * when nginx is missing, except under CI=true, where a missing nginx is a failure.
 */
export function requireNginx(ctx: Mocha.Context): void {
  if (existsSync(NGINX)) return;
  if (process.env.CI === "true") throw new Error(`${NGINX} is missing; CI must install Debian's nginx`);
  console.log(`    (skipped: ${NGINX} not installed; apt-get install nginx to run the reverse-proxy test)`);
  ctx.skip();
}

export interface NginxProxy {
  /** http://127.0.0.1:<port> of each server block, in the order given. */
  urls: string[];
  close(): Promise<void>;
}

/**
 * One server block: `headers` are nginx `proxy_set_header` lines (name -> value, nginx
 * variables allowed; "" removes the header) added to what every block sends.
 */
export interface NginxServer {
  /** Where every path is proxied: http://host:port. */
  upstream: string;
  headers: Record<string, string>;
  /** The local address nginx connects to the upstream from (`proxy_bind`). */
  bind?: string;
  /** Extra http-level directives this block needs (e.g. a `map`). */
  http?: string;
}

/**
 * nginx as a foreground process of its own (no daemon, one process), with a generated
 * config, its prefix, pid, logs and temp dirs in a fresh temp dir, listening on loopback
 * ports, each server block proxying every path to its upstream.
 */
export async function startNginx(servers: NginxServer[]): Promise<NginxProxy> {
  const dir = await mkdtemp(join(tmpdir(), "vg-nginx-"));
  for (const sub of ["body", "proxy", "fastcgi", "uwsgi", "scgi", "logs"]) await mkdir(join(dir, sub));
  const ports = await Promise.all(servers.map(() => freePort()));
  const blocks = servers.map((s, i) => {
    const headers = Object.entries(s.headers)
      .map(([name, value]) => `      proxy_set_header ${name} "${value}";`)
      .join("\n");
    return `
  server {
    listen 127.0.0.1:${ports[i]};
    location / {
      proxy_pass ${s.upstream};${s.bind ? `\n      proxy_bind ${s.bind};` : ""}
      proxy_http_version 1.1;
      proxy_set_header Host $http_host;
      proxy_set_header Connection "";
${headers}
    }
  }`;
  });
  const conf = `
daemon off;
master_process off;
worker_processes 1;
pid ${dir}/nginx.pid;
error_log ${dir}/logs/error.log warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path ${dir}/body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
${servers.map((s) => s.http ?? "").join("\n")}
${blocks.join("\n")}
}
`;
  await writeFile(join(dir, "nginx.conf"), conf);
  const child = spawn(NGINX, ["-p", dir, "-c", join(dir, "nginx.conf"), "-e", join(dir, "logs", "error.log")], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout!.on("data", (c: Buffer) => (out += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (out += c.toString()));
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  try {
    for (const port of ports) await waitForPort(port, child, () => out);
  } catch (err) {
    child.kill("SIGKILL");
    await exited;
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    urls: ports.map((p) => `http://127.0.0.1:${p}`),
    async close() {
      stop(child);
      await exited;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function stop(child: ChildProcess) {
  // SIGQUIT: nginx's graceful shutdown.
  if (child.exitCode === null && child.signalCode === null) child.kill("SIGQUIT");
}

/** Resolves once `port` accepts connections; fails if nginx exits first. */
async function waitForPort(port: number, child: ChildProcess, output: () => string): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt++) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`nginx exited:\n${output()}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = createConnection({ host: "127.0.0.1", port });
      socket.once("connect", () => {
        socket.destroy();
        resolve(true);
      });
      socket.once("error", () => resolve(false));
    });
    if (open) return;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`nginx did not listen on ${port}:\n${output()}`);
}
