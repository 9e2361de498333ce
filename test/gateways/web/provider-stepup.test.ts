import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, type Jar } from "../../support/agent-oauth.js";
import { startIdp, type TestIdp } from "../../support/oidc-idp.js";
import { freePort } from "../../support/ports.js";

/**
 * The step-up page of a deployment that offers only its provider (with a required acr)
 * sends the person to confirm there, and comes back to the page they came from.
 */
describe("web pages: step-up at the organisation's provider", () => {
  let stack: TestStack;
  let idp: TestIdp;
  before(async function () {
    this.timeout(180_000);
    const port = await freePort();
    stack = await startStack({
      gateway: true,
      publicUrls: true,
      oidc: { issuer: `http://127.0.0.1:${port}`, clientId: "vaultgate", clientSecret: "vaultgate-idp-secret", stepUpAcr: ["mfa"] },
      signinMethods: ["oidc"],
    });
    idp = await startIdp({ redirectUris: [`${stack.url}/signin/oidc/callback`], port });
  });
  after(async () => {
    await stack?.close();
    await idp?.stop();
  });

  async function signedIn(): Promise<{ jar: Jar; sub: string }> {
    const user = await createUser(stack);
    const sub = `su-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const jar = createJar(stack.url);
    const go = await jar.get("/signin/oidc");
    const back = await jar.get(await idp.signIn(go.headers.get("location")!, sub));
    expect(back.status).to.equal(303);
    return { jar, sub };
  }

  const fresh = async (jar: Jar) => {
    const token = [...jar.cookies].find(([k]) => k.endsWith("vg_session"))?.[1] ?? "";
    return (await stack.clients.grants.getSession({ sessionToken: token })).session!.stepUpFresh;
  };

  /** The step-up page's provider link, followed through the provider; the callback's answer. */
  async function stepUpAtProvider(jar: Jar, sub: string, returnTo: string): Promise<Response> {
    const page = await (await jar.get(`/stepup?return_to=${encodeURIComponent(returnTo)}`)).text();
    const m = /href="(\/signin\/oidc\?step_up=1&amp;return_to=[^"]+)"/.exec(page);
    expect(m, "a provider step-up link").to.not.equal(null);
    expect(page).not.to.include('action="/stepup"');
    const go = await jar.get(m![1]!.replace(/&amp;/g, "&"));
    expect(go.status).to.equal(303);
    return jar.get(await idp.signIn(go.headers.get("location")!, sub));
  }

  it("confirming at the provider with the required acr counts, and returns to the page", async () => {
    const { jar, sub } = await signedIn();
    expect(await fresh(jar)).to.equal(false);
    await idp.setLogin({ acr: "mfa", amr: ["pwd", "otp"] });
    const back = await stepUpAtProvider(jar, sub, "/dashboard/money");
    expect(back.status).to.equal(303);
    expect(back.headers.get("location")).to.equal("/dashboard/money");
    expect(await fresh(jar)).to.equal(true);
  });

  it("a too-weak acr is refused with a page to act on, and does not count", async () => {
    const { jar, sub } = await signedIn();
    await idp.setLogin({ acr: "pwd", amr: ["pwd"] });
    const back = await stepUpAtProvider(jar, sub, "/dashboard/money");
    expect(back.status).to.equal(403);
    const page = await back.text();
    expect(page).to.match(/try the confirmation again/);
    // The way on is back to the page that asked for the confirmation, not the agents list.
    expect(page).to.include('href="/dashboard/money"');
    expect(page).not.to.include('href="/dashboard/agents"');
    expect(await fresh(jar)).to.equal(false);
  });

  it("a stale auth_time is refused with a page, and does not count", async () => {
    const { jar, sub } = await signedIn();
    await idp.setLogin({ acr: "mfa", amr: ["otp"] });
    await idp.tamper("stale-auth-time");
    try {
      const back = await stepUpAtProvider(jar, sub, "/dashboard/money");
      expect(back.status).to.equal(403);
      expect(await back.text()).to.match(/try the confirmation again/);
    } finally {
      await idp.tamper("none");
    }
    expect(await fresh(jar)).to.equal(false);
  });

  it("a step-up answered by another person at the provider is refused", async () => {
    const { jar } = await signedIn();
    const other = await signedIn();
    await idp.setLogin({ acr: "mfa", amr: ["otp"] });
    const back = await stepUpAtProvider(jar, other.sub, "/dashboard/money");
    expect(back.status).to.equal(403);
    expect(await fresh(jar)).to.equal(false);
  });

  it("a return_to to another site is not followed", async () => {
    const { jar, sub } = await signedIn();
    await idp.setLogin({ acr: "mfa", amr: ["otp"] });
    const back = await stepUpAtProvider(jar, sub, "https://evil.example/x");
    expect(back.status).to.equal(303);
    expect(back.headers.get("location")!.startsWith("/")).to.equal(true);
    expect(back.headers.get("location")!.startsWith("//")).to.equal(false);
  });
});
