import { expect } from "chai";
import { createScratchDatabase } from "../support/db.js";
import { postRpc } from "../support/mcp.js";
import { startServiceProcess, tempDataDir, type ServiceProcess } from "../support/process.js";
import { expectHttpError, expectJsonRpcError, expectOAuthError } from "../support/refusals.js";

async function get(url: string, headers: Record<string, string> = {}) {
  const res = await fetch(url, { headers, redirect: "manual" });
  const text = await res.text();
  return { status: res.status, headers: res.headers, text, body: /^\s*[{[]/.test(text) ? (JSON.parse(text) as unknown) : undefined };
}

/** A `--role gateway` process whose core stops and comes back, as in a core redeploy. */
describe("vaultgate serve --role gateway: core unreachable (real processes)", function () {
  this.timeout(180_000);
  let dir: Awaited<ReturnType<typeof tempDataDir>>;
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  let env: Record<string, string>;
  let core: ServiceProcess | undefined;
  let gateway: ServiceProcess;

  before(async () => {
    dir = await tempDataDir();
    scratch = await createScratchDatabase();
    env = { DATA_DIR: dir.path, ...(scratch ? { DATABASE_URL: scratch.url } : {}) };
    core = await startServiceProcess("core", env);
    gateway = await startServiceProcess("gateway", { ...env, CORE_URL: core.coreUrl! });
    expect(await core.stop(), core.output()).to.equal(0);
  });
  after(async () => {
    await gateway?.stop();
    await core?.stop();
    await scratch?.drop();
    await dir?.remove();
  });

  it("every surface answers a retryable 503 in its own envelope, and the log has no error", async () => {
    const g = gateway.gatewayUrl!;
    const ready = await get(`${g}/readyz`);
    expect({ status: ready.status, body: ready.body }).to.deep.equal({ status: 503, body: { status: "not_ready", failing: ["core"] } });

    for (const res of [
      await get(`${g}/api/partner/events`, { authorization: "Bearer x" }),
      await get(`${g}/api/partner/treasury`, { authorization: "Bearer x" }),
    ]) {
      expectHttpError(res, 503, "temporarily_unavailable");
      expect(res.headers.get("retry-after")).to.equal("5");
    }
    const token = await fetch(`${g}/api/partner/oauth/token`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "grant_type=client_credentials&client_id=gpc_a_00000000&client_secret=gps_x",
    });
    expect(token.headers.get("retry-after")).to.equal("5");
    await expectOAuthError(token, 503, "temporarily_unavailable");

    const page = await get(`${g}/dashboard/agents`, { cookie: "vg_session=x" });
    expect(page.status, page.text).to.equal(503);
    expect(page.text).to.contain("Temporarily unavailable");

    const rpc = await postRpc(
      `${g}/mcp/read`,
      { jsonrpc: "2.0", id: 1, method: "tools/call", params: { name: "accounts.list", arguments: {} } },
      { authorization: "Bearer x" },
    );
    expect(expectJsonRpcError(rpc, -32603, "temporarily_unavailable").data?.retry_after_seconds).to.equal(5);

    const lines = gateway
      .output()
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as { level: number; msg: string });
    expect(lines.filter((l) => l.level >= 50)).to.deep.equal([]);
    expect(lines.some((l) => l.msg === "core unreachable")).to.equal(true);
  });

  it("recovers without a restart once core is back on its address", async () => {
    core = await startServiceProcess("core", { ...env, CORE_PORT: new URL(core!.coreUrl!).port });
    const ready = await get(`${gateway.gatewayUrl}/readyz`);
    expect({ status: ready.status, body: ready.body }, ready.text).to.deep.equal({ status: 200, body: { status: "ready" } });
  });
});
