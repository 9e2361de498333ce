import { expect } from "chai";
import { createJar } from "../support/agent-oauth.js";
import { createScratchDatabase } from "../support/db.js";
import { startIdp, type TestIdp } from "../support/oidc-idp.js";
import { freePort } from "../support/ports.js";
import { runCli, startServiceProcess, tempDataDir, type ServiceProcess } from "../support/process.js";

/**
 * `vaultgate serve` with OIDC_ISSUER naming a provider whose issuer has a path ending in a slash
 * (as some providers' tenants do): the setting reaches discovery as written, and people sign in.
 */
describe("OIDC_ISSUER with a path and a trailing slash reaches the running service as written", function () {
  this.timeout(180_000);
  let idp: TestIdp;
  let service: ServiceProcess;
  let dir: Awaited<ReturnType<typeof tempDataDir>>;
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  let port: number;
  before(async () => {
    port = await freePort();
    idp = await startIdp({ redirectUris: [`http://127.0.0.1:${port}/signin/oidc/callback`], issuerPath: "/tenant/v2.0/" });
    dir = await tempDataDir();
    scratch = await createScratchDatabase();
    service = await startServiceProcess("all", {
      DATA_DIR: dir.path,
      ...(scratch ? { DATABASE_URL: scratch.url } : {}),
      PORT: String(port),
      APP_URL: `http://127.0.0.1:${port}`,
      OIDC_ISSUER: idp.issuer,
      OIDC_CLIENT_ID: idp.clientId,
      OIDC_CLIENT_SECRET: idp.clientSecret,
      SIGNIN_METHODS: "oidc",
    });
  });
  after(async () => {
    await service?.stop();
    await idp?.stop();
    await scratch?.drop();
    await dir?.remove();
  });

  it("signs a person in at that provider, and refuses a callback replayed", async () => {
    expect(idp.issuer).to.match(/\/tenant\/v2\.0\/$/);
    const email = `issuer-path-${Date.now()}@example.com`;
    const created = await runCli(["user", "create", "--email", email], {
      DATA_DIR: dir.path,
      CORE_URL: service.coreUrl!,
      ...(scratch ? { DATABASE_URL: scratch.url } : {}),
    });
    expect(created.code, created.stderr).to.equal(0);
    await idp.addAccount({ sub: "issuer-path", email, email_verified: true });
    const jar = createJar(`http://127.0.0.1:${port}`);
    const go = await jar.get(`/signin/oidc?return_to=${encodeURIComponent("/dashboard/money")}`);
    expect(go.status, await go.clone().text()).to.equal(303);
    expect(go.headers.get("location")!.startsWith(idp.issuer)).to.equal(true);
    const callback = await idp.signIn(go.headers.get("location")!, "issuer-path");
    const back = await jar.get(callback);
    expect(back.status, await back.clone().text()).to.equal(303);
    expect(back.headers.get("location")).to.equal("/dashboard/money");
    expect((await jar.get("/dashboard/money")).status).to.equal(200);
    expect((await jar.get(callback)).status).to.equal(403);
  });
});
