// Sign-in at a company's OIDC provider in Chromium, each in a fresh browser context: our server
// time (browser timings of /signin/oidc and the callback, less our calls to the provider as it
// timed them) next to the provider's own. docs/benchmarks.md has the method and the target.
import { randomBytes } from "node:crypto";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { Page, Request } from "playwright-core";
import { createCoreClients } from "../gateways/core-clients.js";
import { CHROMIUM } from "../test/support/browser.js";
import { startIdp } from "../test/support/oidc-idp.js";
import { tempDataDir } from "../test/support/process.js";
import { benchDatabase, fmt, percentile, QUICK, startService, table, verdict } from "./support.js";
import { freePort } from "../test/support/ports.js";

const SIGNINS = QUICK ? 12 : 120;
const WARMUP = 3;
const CLIENT_SECRET = "bench-idp-secret-0123456789abcdef";
/** The provider's answers to our server rather than the browser: the token request, and discovery and keys when re-read. */
const BY_OUR_SERVER = (path: string) => path === "/token" || path === "/jwks" || path.startsWith("/.well-known/");

/** Server time of one request as the browser saw it: from the request sent to the first response byte. */
function serverMs(req: Request): number {
  const t = req.timing();
  return t.responseStart - t.requestStart;
}

export async function run(): Promise<void> {
  const db = await benchDatabase();
  const dir = await tempDataDir();
  const port = await freePort();
  const app = `http://127.0.0.1:${port}`;
  const idp = await startIdp({ redirectUris: [`${app}/signin/oidc/callback`], clientSecret: CLIENT_SECRET });
  const adminToken = randomBytes(16).toString("hex");
  const gatewayToken = randomBytes(16).toString("hex");
  const service = await startService({
    DATABASE_URL: db.url,
    DATA_DIR: dir.path,
    ADMIN_TOKEN: adminToken,
    GATEWAY_TOKEN: gatewayToken,
    PORT: String(port),
    BASE_URL: app,
    APP_URL: app,
    AUTH_URL: app,
    OIDC_ISSUER: idp.issuer,
    OIDC_CLIENT_ID: idp.clientId,
    OIDC_CLIENT_SECRET: CLIENT_SECRET,
    SIGNIN_METHODS: "oidc",
  });
  const { chromium } = await import("playwright-core");
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update"],
  });
  try {
    const clients = createCoreClients(createGrpcTransport({ baseUrl: service.coreUrl }), { gatewayToken });
    const email = `bench-${randomBytes(4).toString("hex")}@example.com`;
    await clients.partners.createUser({ email }, { headers: { authorization: `Bearer ${adminToken}` } });
    const sub = "bench-person";
    await idp.addAccount({ sub, email, email_verified: true });

    const ours: number[] = [];
    const theirs: number[] = [];
    const token: number[] = [];
    const start: number[] = [];
    for (let i = 0; i < WARMUP + SIGNINS; i++) {
      const one = await signIn(browser, app, sub);
      const provider = await idp.takeTimings();
      const tokenMs = provider.filter((t) => BY_OUR_SERVER(t.path)).reduce((a, t) => a + t.ms, 0);
      if (i < WARMUP) continue; // discovery, keys, JIT and pools
      ours.push(one.signinMs + one.callbackMs - tokenMs);
      theirs.push(provider.reduce((a, t) => a + t.ms, 0));
      token.push(tokenMs);
      start.push(one.signinMs);
    }
    const row = (name: string, v: number[]) => ({ "server time": name, n: v.length, "p50 ms": fmt(percentile(v, 50)), "p95 ms": fmt(percentile(v, 95)) });
    table([
      row("ours (/signin/oidc + callback, less our calls to the provider)", ours),
      row("  of which /signin/oidc", start),
      row("provider (all its requests)", theirs),
      row("  of which our calls (token; discovery, keys)", token),
    ]);
    const p50 = percentile(ours, 50);
    verdict("sign-in at the provider in Chromium: our server time p50 < 50 ms", `${fmt(p50)} ms (provider ${fmt(percentile(theirs, 50))} ms)`, p50 < 50);
  } finally {
    await browser.close();
    await service.stop();
    await idp.stop();
    await dir.remove();
  }
}

/** One sign-in in a fresh context; the browser's server time of our two sign-in responses. */
async function signIn(browser: import("playwright-core").Browser, app: string, sub: string): Promise<{ signinMs: number; callbackMs: number }> {
  const context = await browser.newContext({ javaScriptEnabled: false });
  try {
    const page: Page = await context.newPage();
    const seen: Request[] = [];
    page.on("requestfinished", (r) => seen.push(r));
    await page.goto(`${app}/signin/oidc`);
    if ((await page.title()) !== "Example Corp sign-in") throw new Error(`not at the provider's login page: ${page.url()}`);
    await page.selectOption("#account", sub);
    await page.fill("#password", "correct horse");
    const landed = page.waitForURL(`${app}/dashboard/agents`);
    await page.click("button[type=submit]");
    await landed;
    const ours = (path: string) => seen.filter((r) => new URL(r.url()).origin === app && new URL(r.url()).pathname === path);
    const [start, callback, dashboard] = [ours("/signin/oidc"), ours("/signin/oidc/callback"), ours("/dashboard/agents")];
    if (start.length !== 1 || callback.length !== 1) throw new Error(`expected our two sign-in responses, saw ${seen.map((r) => r.url()).join(", ")}`);
    const statuses = await Promise.all([start[0]!, callback[0]!, dashboard[0]].map(async (r) => (await r?.response())?.status()));
    if (statuses.join() !== "303,303,200") throw new Error(`sign-in answered ${statuses.join(", ")} (/signin/oidc, callback, dashboard)`);
    return { signinMs: serverMs(start[0]!), callbackMs: serverMs(callback[0]!) };
  } finally {
    await context.close();
  }
}
