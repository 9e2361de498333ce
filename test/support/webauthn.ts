import { readFile } from "node:fs/promises";
import { createServer } from "node:http";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type * as SimpleWebAuthnBrowser from "@simplewebauthn/browser";
import type { PublicKeyCredentialCreationOptionsJSON, PublicKeyCredentialRequestOptionsJSON } from "@simplewebauthn/browser";
import type { CDPSession, Page } from "playwright-core";
import { CHROMIUM } from "./browser.js";

const bundle = fileURLToPath(new URL("../../node_modules/@simplewebauthn/browser/dist/bundle/index.umd.min.js", import.meta.url));

/** The blank page's global scope: the UMD bundle puts @simplewebauthn/browser at `SimpleWebAuthnBrowser`. */
export type WebAuthnPageScope = typeof globalThis & { SimpleWebAuthnBrowser: typeof SimpleWebAuthnBrowser };

/**
 * Chromium with a virtual user-verifying authenticator on a blank localhost page with
 * @simplewebauthn/browser: real browser ceremonies without the dashboard pages.
 */
export async function launchWebAuthnBrowser() {
  const script = await readFile(bundle, "utf8");
  const server = createServer((req, res) => {
    if (req.url === "/webauthn.js") res.writeHead(200, { "content-type": "text/javascript" }).end(script);
    else res.writeHead(200, { "content-type": "text/html" }).end(`<!doctype html><title>passkeys</title><script src="/webauthn.js"></script>`);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const origin = `http://localhost:${(server.address() as { port: number }).port}`;
  const { chromium } = await import("playwright-core");
  const userDataDir = await mkdtemp(join(tmpdir(), "vg-webauthn-"));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const page: Page = context.pages()[0] ?? (await context.newPage());
  await page.goto(origin);
  const cdp: CDPSession = await context.newCDPSession(page);
  await cdp.send("WebAuthn.enable");
  const { authenticatorId } = await cdp.send("WebAuthn.addVirtualAuthenticator", {
    options: {
      protocol: "ctap2",
      transport: "internal",
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  return {
    origin,
    page,
    cdp,
    authenticatorId,
    /** navigator.credentials.create through @simplewebauthn/browser; the RegistrationResponseJSON. */
    async create(optionsJSON: unknown) {
      return page.evaluate(
        async (o) => (globalThis as WebAuthnPageScope).SimpleWebAuthnBrowser.startRegistration({ optionsJSON: o }),
        optionsJSON as PublicKeyCredentialCreationOptionsJSON,
      );
    },
    /** navigator.credentials.get; the AuthenticationResponseJSON. */
    async get(optionsJSON: unknown) {
      return page.evaluate(
        async (o) => (globalThis as WebAuthnPageScope).SimpleWebAuthnBrowser.startAuthentication({ optionsJSON: o }),
        optionsJSON as PublicKeyCredentialRequestOptionsJSON,
      );
    },
    /** Turns the authenticator's user verification off (a device that cannot verify the person). */
    async setUserVerified(isUserVerified: boolean) {
      await cdp.send("WebAuthn.setUserVerified", { authenticatorId, isUserVerified });
    },
    /** Makes the authenticator a clone whose signature counter went back to `signCount`. */
    async rewindCounter(signCount: number) {
      const { credentials } = await cdp.send("WebAuthn.getCredentials", { authenticatorId });
      for (const c of credentials) {
        await cdp.send("WebAuthn.removeCredential", { authenticatorId, credentialId: c.credentialId });
        await cdp.send("WebAuthn.addCredential", { authenticatorId, credential: { ...c, signCount } });
      }
    },
    async close() {
      await context.close();
      await rm(userDataDir, { recursive: true, force: true });
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export type WebAuthnBrowser = Awaited<ReturnType<typeof launchWebAuthnBrowser>>;
