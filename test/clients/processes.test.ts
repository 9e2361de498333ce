import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { expect } from "chai";
import { createRemoteJWKSet, jwtVerify } from "jose";
import { createScratchDatabase, requirePostgres } from "../support/db.js";
import { runCli, startServiceProcess, tempDataDir, type ServiceProcess } from "../support/process.js";
import { basic, postToken } from "../support/partners.js";

const CC = "grant_type=client_credentials";

async function mint(url: string, clientId: string, clientSecret: string) {
  return postToken(url, CC, { authorization: basic(clientId, clientSecret) });
}

/** The service as operators run it: real processes, the CLI, split roles and replicas. */
describe("vaultgate processes", function () {
  this.timeout(120_000);

  describe("core and gateway as two processes", () => {
    let dir: Awaited<ReturnType<typeof tempDataDir>>;
    let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
    let core: ServiceProcess;
    let gateway: ServiceProcess;
    let env: Record<string, string>;

    before(async () => {
      dir = await tempDataDir();
      scratch = await createScratchDatabase();
      env = { DATA_DIR: dir.path, ...(scratch ? { DATABASE_URL: scratch.url } : {}) };
      core = await startServiceProcess("core", env);
      env.CORE_URL = core.coreUrl!;
      gateway = await startServiceProcess("gateway", env);
    });
    after(async () => {
      await gateway?.stop();
      await core?.stop();
      await scratch?.drop();
      await dir?.remove();
    });

    it("creates a partner with the CLI and mints a token through the split gateway", async () => {
      const created = await runCli(["partner", "create", "--name", "Split Co", "--entitlements", "kyc:read,wallet:read"], env);
      expect(created.code, created.stderr).to.equal(0);
      expect(Object.keys(created.json!).sort()).to.deep.equal(["client_id", "client_secret", "entitlements", "partner_id", "status"]);
      expect(created.json!.client_id).to.match(/^gpc_split-co_[0-9a-f]{8}$/);
      expect(created.json!.entitlements).to.deep.equal(["kyc:read", "wallet:read"]);

      const res = await mint(gateway.gatewayUrl!, created.json!.client_id as string, created.json!.client_secret as string);
      expect(res.status).to.equal(200);
      const { access_token, scope } = (await res.json()) as { access_token: string; scope: string };
      expect(scope).to.equal("kyc:read wallet:read");
      const jwks = createRemoteJWKSet(new URL(`${gateway.gatewayUrl}/.well-known/agent-jwks.json`));
      await jwtVerify(access_token, jwks, { algorithms: ["ES256"], typ: "at+jwt" });
      expect((await fetch(`${gateway.gatewayUrl}/readyz`)).status).to.equal(200);
    });

    it("the gateway's ready line names the core it dials and no database, which only core opens", () => {
      const ready = gateway
        .output()
        .split("\n")
        .filter((l) => l.startsWith("{"))
        .map((l) => JSON.parse(l) as { msg: string; core?: string; database?: string })
        .find((l) => l.msg === "Vaultgate is ready");
      expect(ready, gateway.output()).to.not.equal(undefined);
      expect(ready!.core).to.equal(core.coreUrl);
      expect(ready).to.not.have.property("database");
    });

    it("checks a wrong secret on a core thread at nice 19 under SCHED_IDLE; the thread serving requests keeps its priority", async () => {
      const res = await mint(gateway.gatewayUrl!, `gpc_probe_${Date.now().toString(16)}`, "gps_wrong");
      expect(res.status).to.equal(401);
      // Linux /proc: fields after the command (which may hold spaces) start at state (field 3);
      // nice is field 19, the scheduling policy field 41 (0 SCHED_OTHER, 5 SCHED_IDLE).
      const pid = core.child.pid!;
      const threads = readdirSync(`/proc/${pid}/task`).map((tid) => {
        const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
        const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
        return { tid: Number(tid), nice: Number(f[16]), policy: Number(f[38]) };
      });
      // The hasher threads started so far (one or two): each at nice 19 and SCHED_IDLE.
      const lowered = threads.filter((t) => t.nice === 19 || t.policy === 5);
      expect(lowered).to.have.length.within(1, 2);
      for (const t of lowered) expect(t).to.deep.include({ nice: 19, policy: 5 });
      expect(threads.find((t) => t.tid === pid)).to.deep.include({ nice: 0, policy: 0 });
      expect(core.output()).to.not.match(/secret checks (could not lower|run at nice 19 without)/);
    });

    it("runs the operator commands with JSON output", async () => {
      const created = (await runCli(["partner", "create", "--name", "Ops", "--slug", "ops", "--status", "pending", "--entitlements", ""], env)).json!;
      expect(created.status).to.equal("pending");
      expect(created.entitlements).to.deep.equal([]);
      const id = created.client_id as string;

      const activated = await runCli(["partner", "activate", id], env);
      expect(activated.json!.status).to.equal("active");
      const ent = await runCli(["partner", "entitlements", id, "--set", "kyc:read,treasury:write"], env);
      expect(ent.json!.entitlements).to.deep.equal(["kyc:read", "treasury:write"]);
      const rotated = await runCli(["partner", "rotate-secret", id], env);
      expect(rotated.json!.client_id).to.equal(id);
      expect((await mint(gateway.gatewayUrl!, id, rotated.json!.client_secret as string)).status).to.equal(200);
      expect((await mint(gateway.gatewayUrl!, id, created.client_secret as string)).status).to.equal(401);
      const suspended = await runCli(["partner", "suspend", id], env);
      expect(suspended.json!.status).to.equal("suspended");
      expect((await mint(gateway.gatewayUrl!, id, rotated.json!.client_secret as string)).status).to.equal(403);

      const keys = await runCli(["keys", "rotate"], env);
      expect(keys.code, keys.stderr).to.equal(0);
      expect(keys.json!.published_kids).to.include(keys.json!.kid);
      expect((keys.json!.published_kids as string[]).length).to.be.greaterThan(1);
    });

    it("fails with a clear message and a non-zero exit", async () => {
      const unknown = await runCli(["partner", "rotate-secret", "gpc_nobody_00000000"], env);
      expect(unknown.code).to.equal(1);
      expect(unknown.stderr).to.match(/no such partner/);
      const badScope = await runCli(["partner", "create", "--name", "X", "--entitlements", "root:all"], env);
      expect(badScope.code).to.equal(1);
      expect(badScope.stderr).to.match(/unknown entitlements: root:all/);
      const usage = await runCli(["partner", "explode"], env);
      expect(usage.code).to.equal(2);
      const noCore = await runCli(["partner", "suspend", "x"], { ...env, CORE_URL: "http://127.0.0.1:9" });
      expect(noCore.code).to.equal(1);
      expect(noCore.stderr).to.match(/cannot reach core at http:\/\/127\.0\.0\.1:9/);
      const noToken = await runCli(["partner", "suspend", "x"], { ...env, ADMIN_TOKEN: "wrong" });
      expect(noToken.code).to.equal(1);
      expect(noToken.stderr).to.match(/operator credential required/);
    });
  });

  it("vaultgate migrate applies every migration once", async () => {
    const dir = await tempDataDir();
    const scratch = await createScratchDatabase();
    const env = { DATA_DIR: dir.path, ...(scratch ? { DATABASE_URL: scratch.url } : {}) };
    try {
      const first = await runCli(["migrate"], env);
      expect(first.code, first.stderr).to.equal(0);
      expect(first.json!.applied).to.include("0001-platform");
      const again = await runCli(["migrate"], env);
      expect(again.json!.applied).to.deep.equal([]);
    } finally {
      await scratch?.drop();
      await dir.remove();
    }
  });

  describe("two replicas against one Postgres", () => {
    let dirs: Awaited<ReturnType<typeof tempDataDir>>[] = [];
    let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
    let replicas: ServiceProcess[] = [];
    let env: Record<string, string>;

    before(async function () {
      // PGlite is an embedded, single-process database: replicas need a server.
      requirePostgres(this, "replicas need a database server");
      scratch = await createScratchDatabase();
      dirs = [await tempDataDir(), await tempDataDir()];
      // Replicas share the keys outside the database, as a deployment must.
      env = {
        DATABASE_URL: scratch!.url,
        ADMIN_TOKEN: "replica-admin-token",
        WEBHOOK_SECRET_KEY: randomBytes(32).toString("base64"),
        SIGNIN_CODE_KEY: randomBytes(32).toString("base64"),
      };
      // Started together: migrations run once under knex's lock.
      replicas = await Promise.all(dirs.map((d) => startServiceProcess("all", { ...env, DATA_DIR: d.path })));
    });
    after(async () => {
      await Promise.all(replicas.map((r) => r.stop()));
      await scratch?.drop();
      await Promise.all(dirs.map((d) => d.remove()));
    });

    it("share the issuance rate limit and each other's published keys", async () => {
      const created = (await runCli(["partner", "create", "--name", "Replicated"], { ...env, CORE_URL: replicas[0]!.coreUrl!, DATA_DIR: dirs[0]!.path })).json!;
      const [a, b] = replicas.map((r) => r.gatewayUrl!);
      const tokens: string[] = [];
      for (let i = 0; i < 30; i++) {
        const res = await mint(i % 2 ? a! : b!, created.client_id as string, created.client_secret as string);
        expect(res.status, `attempt ${i + 1}`).to.equal(200);
        tokens.push(((await res.json()) as { access_token: string }).access_token);
      }
      expect((await mint(a!, created.client_id as string, created.client_secret as string)).status).to.equal(429);
      expect((await mint(b!, created.client_id as string, created.client_secret as string)).status).to.equal(429);

      // A token signed by one replica verifies against the other replica's JWKS.
      const jwksOfA = createRemoteJWKSet(new URL(`${a}/.well-known/agent-jwks.json`));
      for (const token of [tokens[0]!, tokens[1]!]) await jwtVerify(token, jwksOfA, { algorithms: ["ES256"] });
    });
  });
});
