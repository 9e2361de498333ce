import { expect } from "chai";
import { launchPhoneBrowser, requireChromium } from "../support/browser.js";
import { startIdp, type TestIdp } from "../support/oidc-idp.js";
import { freePort } from "../support/ports.js";
import { runCli, startServiceProcess, tempDataDir, type ServiceProcess } from "../support/process.js";

/** A browser's cookies, kept per host as a browser keeps host-only cookies. */
function hostJars() {
  const jars = new Map<string, Map<string, string>>();
  const jar = (host: string) => jars.get(host) ?? jars.set(host, new Map()).get(host)!;
  return {
    jar,
    async get(url: string): Promise<Response> {
      const host = new URL(url).host;
      const cookies = [...jar(host)].map(([k, v]) => `${k}=${v}`).join("; ");
      const res = await fetch(url, { redirect: "manual", headers: cookies ? { cookie: cookies } : {} });
      for (const line of res.headers.getSetCookie()) {
        const [pair] = line.split(";");
        const eq = pair!.indexOf("=");
        if (/max-age=0/i.test(line)) jar(host).delete(pair!.slice(0, eq));
        else jar(host).set(pair!.slice(0, eq), pair!.slice(eq + 1));
      }
      return res;
    },
  };
}

/**
 * The consent page (AUTH_URL) on another host than the dashboard (APP_URL), where the provider
 * sends every callback: a sign-in started on the consent host must finish there, with its session.
 */
describe("browser: provider sign-in started on AUTH_URL's host", function () {
  this.timeout(180_000);
  let idp: TestIdp;
  let service: ServiceProcess;
  let dir: Awaited<ReturnType<typeof tempDataDir>>;
  let port: number;
  before(async () => {
    port = await freePort();
    idp = await startIdp({ redirectUris: [`http://localhost:${port}/signin/oidc/callback`] });
    dir = await tempDataDir();
    service = await startServiceProcess("all", {
      DATA_DIR: dir.path,
      PORT: String(port),
      APP_URL: `http://localhost:${port}`,
      AUTH_URL: `http://127.0.0.1:${port}`,
      OIDC_ISSUER: idp.issuer,
      OIDC_CLIENT_ID: idp.clientId,
      OIDC_CLIENT_SECRET: idp.clientSecret,
      SIGNIN_METHODS: "oidc",
    });
  });
  after(async () => {
    await service?.stop();
    await idp?.stop();
    await dir?.remove();
  });

  /** A user of the service and an account at the provider for `sub`, linked by a verified address. */
  async function person(sub: string) {
    const email = `${sub}-${Date.now()}@example.com`;
    const created = await runCli(["user", "create", "--email", email], { DATA_DIR: dir.path, CORE_URL: service.coreUrl! });
    expect(created.code, created.stderr).to.equal(0);
    await idp.addAccount({ sub, email, email_verified: true });
  }

  it("Chromium signs in at the provider from the consent host and lands, signed in, on the page it asked for there", async function () {
    requireChromium(this);
    await person("chrome-auth-host");
    const browser = await launchPhoneBrowser();
    try {
      const page = await browser.context.newPage();
      const auth = `http://127.0.0.1:${port}`;
      await page.goto(`${auth}/signin?return_to=${encodeURIComponent("/dashboard/money")}`);
      await page.click("text=Sign in with your organisation");
      await page.selectOption("#account", "chrome-auth-host");
      await page.fill("#password", "correct horse");
      await page.click("button[type=submit]");
      expect(page.url()).to.equal(`${auth}/dashboard/money`);
      expect(await page.title()).to.match(/money/i);
    } finally {
      await browser.close();
    }
  });

  it("the callback at APP_URL's host hands sign-in and step-up to the host that started them, which completes them", async () => {
    await person("auth-host");
    const browser = hostJars();
    const auth = `http://127.0.0.1:${port}`;

    const go = await browser.get(`${auth}/signin/oidc?return_to=${encodeURIComponent("/dashboard/money")}`);
    expect(go.status).to.equal(303);
    const callback = await idp.signIn(go.headers.get("location")!, "auth-host");
    expect(callback.startsWith(`http://localhost:${port}/signin/oidc/callback?`)).to.equal(true);

    const handed = await browser.get(callback);
    expect(handed.status, await handed.clone().text()).to.equal(303);
    expect(handed.headers.get("location")).to.equal(`${auth}/signin/oidc/callback${new URL(callback).search}`);
    const back = await browser.get(handed.headers.get("location")!);
    expect(back.status, await back.clone().text()).to.equal(303);
    expect(back.headers.get("location")).to.equal("/dashboard/money");
    expect((await browser.get(`${auth}/dashboard/money`)).status).to.equal(200);

    // Handed on once: the same callback again, at either host, is the page to start again.
    expect((await browser.get(callback)).status).to.equal(303);
    expect((await browser.get(handed.headers.get("location")!)).status).to.equal(403);

    // A step-up asked for on the consent host comes back the same way and counts for its session.
    const up = await browser.get(`${auth}/signin/oidc?step_up=1&return_to=${encodeURIComponent("/dashboard/money")}`);
    expect(new URL(up.headers.get("location")!).searchParams.get("prompt")).to.equal("login");
    const upCallback = await idp.signIn(up.headers.get("location")!, "auth-host");
    const upHanded = await browser.get(upCallback);
    expect(upHanded.headers.get("location")!.startsWith(`${auth}/signin/oidc/callback?`)).to.equal(true);
    const stepped = await browser.get(upHanded.headers.get("location")!);
    expect(stepped.status, await stepped.clone().text()).to.equal(303);
    expect(stepped.headers.get("location")).to.equal("/dashboard/money");
  });

  it("hostile: a callback brought to APP_URL's host from another browser is handed on and refused there", async () => {
    const stranger = hostJars();
    const res = await stranger.get(`http://localhost:${port}/signin/oidc/callback?code=x&state=y`);
    expect(res.status).to.equal(303);
    expect((await stranger.get(res.headers.get("location")!)).status).to.equal(403);
  });
});
