import { cp } from "node:fs/promises";
import { createServer, type AddressInfo } from "node:net";
import { join } from "node:path";
import { expect } from "chai";
import { requirePostgres } from "../support/db.js";
import { runCli, startServiceProcess, tempDataDir } from "../support/process.js";

/**
 * Start-up that talks: a bad database setting names its variable and exits without a
 * stack trace; a malformed SIGNING_KEY starts but says it is not ready and why.
 */
describe("vaultgate serve start-up (real processes)", function () {
  this.timeout(60_000);
  // Migrating a fresh embedded database is most of a start: migrated once, copied per test.
  let template: Awaited<ReturnType<typeof tempDataDir>> | undefined;
  before(async () => {
    template = await tempDataDir();
    const res = await runCli(["migrate"], { DATA_DIR: template.path });
    expect(res.code, res.stderr).to.equal(0);
  });
  after(async () => {
    await template?.remove();
  });
  const migratedDataDir = async () => {
    const dir = await tempDataDir();
    await cp(join(template!.path, "pgdata"), join(dir.path, "pgdata"), { recursive: true });
    return dir;
  };

  it("an unreachable DATABASE_URL names the variable and exits 1, without a stack trace", async () => {
    const dir = await tempDataDir();
    try {
      // Port 1 on loopback: nothing listens, so the connection is refused at once.
      const res = await runCli(["serve"], {
        DATA_DIR: dir.path,
        DATABASE_URL: "postgres://someone:secret-pw@127.0.0.1:1/vaultgate",
        PORT: "0",
        CORE_PORT: "0",
      });
      expect(res.code).to.equal(1);
      expect(res.stderr).to.include("cannot reach the database named by DATABASE_URL (127.0.0.1:1/vaultgate)");
      expect(res.stderr).to.not.match(/\n\s+at /);
      expect(res.stderr + res.stdout).to.not.include("secret-pw");
      // stdout is the JSON log stream: the driver's warning is one log line, not a stack.
      for (const line of res.stdout.split("\n").filter(Boolean)) expect(() => JSON.parse(line), line).to.not.throw();
    } finally {
      await dir.remove();
    }
  });

  it("migrate against an unreachable DATABASE_URL names the variable, exits 1 with one line per complaint and nothing on stdout", async () => {
    const dir = await tempDataDir();
    try {
      const res = await runCli(["migrate"], { DATA_DIR: dir.path, DATABASE_URL: "postgres://someone:secret-pw@127.0.0.1:1/vaultgate" });
      expect(res.code).to.equal(1);
      expect(res.stdout).to.equal("");
      expect(res.stderr).to.include("vaultgate: cannot reach the database named by DATABASE_URL (127.0.0.1:1/vaultgate): connect ECONNREFUSED 127.0.0.1:1\n");
      expect(res.stderr).to.not.match(/\n\s+at /);
      expect(res.stderr).to.not.include("secret-pw");
    } finally {
      await dir.remove();
    }
  });

  it("a malformed SIGNING_KEY: the process starts, logs that it is not ready and names the failing check", async () => {
    const dir = await migratedDataDir();
    const proc = await startServiceProcess("all", { DATA_DIR: dir.path, SIGNING_KEY: "{not a key" });
    try {
      const lines = proc
        .output()
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as { level: number; msg: string; failing?: string[] });
      const started = lines.find((l) => l.msg?.startsWith("Vaultgate started but is not ready"));
      expect(started, proc.output()).to.not.equal(undefined);
      expect(started!.failing).to.include("signing_key");
      expect(lines.some((l) => l.msg === "Vaultgate is ready")).to.equal(false);
      const ready = await fetch(`${proc.gatewayUrl}/readyz`);
      expect(ready.status).to.equal(503);
      expect(((await ready.json()) as { failing: string[] }).failing).to.include("signing_key");
    } finally {
      await proc.stop();
      await dir.remove();
    }
  });

  it("a healthy start logs that it is ready with the public addresses", async () => {
    const dir = await migratedDataDir();
    const proc = await startServiceProcess("all", { DATA_DIR: dir.path });
    try {
      const ready = proc
        .output()
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as { msg: string; urls?: Record<string, string> })
        .find((l) => l.msg === "Vaultgate is ready");
      expect(ready?.urls?.openapi).to.match(/\/api\/partner\/openapi\.json$/);
      expect((await fetch(`${proc.gatewayUrl}/`, { headers: { accept: "application/json" } })).status).to.equal(200);
    } finally {
      await proc.stop();
      await dir.remove();
    }
  });

  it("writes its request lines while it runs and every line, the last included, when it stops", async () => {
    const dir = await migratedDataDir();
    const proc = await startServiceProcess("all", { DATA_DIR: dir.path });
    const entries = () =>
      proc
        .output()
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as { msg: string; reqId?: string; status?: number });
    try {
      const ids: string[] = [];
      for (let i = 0; i < 20; i++) {
        const res = await fetch(`${proc.gatewayUrl}/no/such/page-${i}`);
        await res.arrayBuffer();
        ids.push(res.headers.get("x-request-id")!);
      }
      // No more traffic: the buffered lines go out on the logger's timer.
      const logged = () =>
        new Set(
          entries()
            .filter((e) => e.msg === "request")
            .map((e) => e.reqId),
        );
      const deadline = Date.now() + 10_000;
      while (!ids.every((id) => logged().has(id)) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(
        ids.filter((id) => !logged().has(id)),
        proc.output(),
      ).to.deep.equal([]);
    } finally {
      expect(await proc.stop()).to.equal(0);
      await dir.remove();
    }
    // The line written after the servers closed went out as the process exited.
    expect(
      entries()
        .map((e) => e.msg)
        .slice(-2),
      proc.output(),
    ).to.deep.equal(["shutting down", "stopped"]);
  });

  it("a port already taken, a HOST that is no address or a pool too small to migrate names the setting to change and exits 1", async function () {
    this.timeout(180_000);
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    const port = String((taken.address() as AddressInfo).port);
    const dir = await migratedDataDir();
    try {
      const base = { DATA_DIR: dir.path, PORT: "0", CORE_PORT: "0" };
      for (const [env, setting] of [
        [{ PORT: port }, "change PORT or HOST"],
        [{ CORE_PORT: port }, "change CORE_PORT or CORE_HOST"],
        [{ METRICS_PORT: port }, "change METRICS_PORT or METRICS_HOST"],
        [{ HOST: "0.0.0.0 extra" }, "HOST must be a host name or IP address"],
        // One connection could never both hold the migration lock and migrate.
        [{ DATABASE_POOL_MAX: "1", DATABASE_URL: "postgres://vaultgate@127.0.0.1:1/x" }, "DATABASE_POOL_MAX must be an integer from 2 to"],
      ] as const) {
        const res = await runCli(["serve"], { ...base, ...env });
        expect(res.code, res.stderr).to.equal(1);
        expect(res.stderr).to.include(setting);
        expect(res.stderr).to.not.match(/\n\s+at /);
      }
    } finally {
      taken.close();
      await dir.remove();
    }
  });

  it("a database server that refuses the login names DATABASE_URL, never its password (PostgreSQL only)", async function () {
    requirePostgres(this, "needs a server that answers and refuses");
    const url = new URL(process.env.TEST_DATABASE_URL!);
    url.password = "secret-pw";
    url.pathname = "/no_such_database_here";
    const dir = await tempDataDir();
    try {
      for (const cmd of ["serve", "migrate"]) {
        const res = await runCli([cmd], { DATA_DIR: dir.path, DATABASE_URL: url.href, PORT: "0", CORE_PORT: "0" });
        expect(res.code, res.stderr).to.equal(1);
        expect(res.stderr).to.include(`vaultgate: the database server at DATABASE_URL (${url.hostname}:${url.port}/no_such_database_here) refused the login`);
        expect(res.stderr + res.stdout).to.not.include("secret-pw");
      }
    } finally {
      await dir.remove();
    }
  });
});
