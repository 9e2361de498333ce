import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import type { BrowserContext } from "playwright-core";

/** Debian's chromium: CI installs it (.ci/run); it is never downloaded. */
export const CHROMIUM = "/usr/bin/chromium";

/** Where page screenshots are kept as test artifacts (gitignored). */
export const BROWSER_ARTIFACTS = join(process.cwd(), "test-artifacts", "browser");

/**
 * Call from a mocha `before(function () {...})`: skips the suite with a visible reason
 * when chromium is missing, except under CI=true, where a missing browser is a failure.
 */
export function requireChromium(ctx: Mocha.Context): void {
  if (existsSync(CHROMIUM)) return;
  if (process.env.CI === "true") throw new Error(`${CHROMIUM} is missing; CI must install Debian's chromium`);
  console.log(`    (skipped: ${CHROMIUM} not installed; apt-get install chromium to run the browser test)`);
  ctx.skip();
}

/**
 * Headless chromium as a phone with JavaScript off (the pages must work without it),
 * a fresh profile, and the flags this closed network needs. close() removes the profile.
 */
export async function launchPhoneBrowser(): Promise<{ context: BrowserContext; close(): Promise<void> }> {
  const { chromium } = await import("playwright-core");
  await mkdir(BROWSER_ARTIFACTS, { recursive: true });
  const userDataDir = await mkdtemp(join(tmpdir(), "vg-chromium-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    javaScriptEnabled: false,
    viewport: { width: 390, height: 844 },
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  return {
    context,
    async close() {
      await context.close();
      await rm(userDataDir, { recursive: true, force: true });
    },
  };
}

/** A stand-in OAuth client's redirect target on 127.0.0.1:0 that just shows a page. */
export async function startLoopbackCallback(title: string): Promise<{ url: string; close(): Promise<void> }> {
  const { createServer } = await import("node:http");
  const server = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "text/html" }).end(`<!doctype html><title>${title}</title><p>Back at the ${title}.</p>`);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}/callback`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

type Page = BrowserContext["pages"] extends () => (infer P)[] ? P : never;
type Shots = { form?: string; code?: string };

async function shoot(page: Page, name: string | undefined) {
  if (name) await page.screenshot({ path: join(BROWSER_ARTIFACTS, `${name}.png`), fullPage: true });
}

/** On /signin: submits the e-mail, then the one-time code from the dev outbox. */
export async function signInOnPage(page: Page, email: string, code: () => Promise<string>, shots: Shots = {}): Promise<void> {
  expect(new URL(page.url()).pathname).to.equal("/signin");
  await shoot(page, shots.form);
  await page.fill("#email", email);
  await page.click("button[type=submit]");
  expect(new URL(page.url()).pathname).to.equal("/signin/code");
  await shoot(page, shots.code);
  await page.fill("#code", await code());
  await page.click("form[action='/signin/code'] button[type=submit]");
}

/** On /stepup: asks for a fresh code and submits it from the dev outbox. */
export async function stepUpOnPage(page: Page, code: () => Promise<string>, shots: Shots = {}): Promise<void> {
  expect(new URL(page.url()).pathname).to.equal("/stepup");
  await shoot(page, shots.form);
  await page.click("form[action='/stepup'] button[type=submit]");
  await shoot(page, shots.code);
  await page.fill("#code", await code());
  await page.click("form[action='/stepup/code'] button[type=submit]");
}
