import { expect } from "chai";
import { createJar, createUser } from "../../support/agent-oauth.js";
import { startIdp, type TestIdp } from "../../support/oidc-idp.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { freeRestartablePort } from "../../support/ports.js";

/** The outage page a person can act on: 503, says to try again shortly, no trace of our code, no flow cookie. */
async function expectOutagePage(res: Response) {
  expect(res.status).to.equal(503);
  expect(res.headers.get("content-type")).to.match(/text\/html/);
  const text = await res.text();
  expect(text).to.match(/Temporarily unavailable/);
  expect(text).to.match(/try again in a moment/);
  expect(text).not.to.match(/at .*\.ts:\d+|Error:/);
  // Signed out: the way on is signing in, not a dashboard that would only send them back.
  expect(text).to.include('<a href="/signin">Sign in</a>');
  expect(text).not.to.include("Go to your agents");
  expect(res.headers.getSetCookie().some((c) => /^vg_oidc(\.[\w-]+)?=[^;]/.test(c))).to.equal(false);
}

/**
 * A provider that goes down after it has been discovered: its process is stopped, and the
 * sign-in pages answer the same 503 page as when it could never be reached, at the callback
 * and at /signin/oidc, while discovery is not repeated for every sign-in.
 */
describe("web pages: the organisation's provider going down after a first sign-in", () => {
  let stack: TestStack;
  let idp: TestIdp;
  let port: number;

  before(async function () {
    this.timeout(180_000);
    port = await freeRestartablePort();
    stack = await startStack({
      gateway: true,
      publicUrls: true,
      oidc: { issuer: `http://127.0.0.1:${port}`, clientId: "vaultgate", clientSecret: "vaultgate-idp-secret", stepUpAcr: [] },
    });
  });
  after(async () => {
    await stack?.close();
    await idp?.stop();
  });

  async function provider() {
    idp = await startIdp({ redirectUris: [`${stack.url}/signin/oidc/callback`], port });
    const user = await createUser(stack);
    const sub = `down-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    return sub;
  }

  /** /signin/oidc up to the provider's redirect back to us (the callback URL), not yet followed. */
  async function atProvider(jar: ReturnType<typeof createJar>, sub: string) {
    const go = await jar.get("/signin/oidc");
    expect(go.status).to.equal(303);
    return idp.signIn(go.headers.get("location")!, sub);
  }

  it("stopped between the provider's answer and the callback: 503 page, and the next /signin/oidc says so too", async function () {
    this.timeout(180_000);
    const sub = await provider();
    const first = createJar(stack.url);
    expect((await first.get(await atProvider(first, sub))).status).to.equal(303);

    const jar = createJar(stack.url);
    const callback = await atProvider(jar, sub);
    await idp.stop();
    await expectOutagePage(await jar.get(callback));
    // Within the minute the metadata would otherwise stand: the outage seen at the callback counts.
    await expectOutagePage(await createJar(stack.url).get("/signin/oidc"));
  });

  it("stopped with no sign-in in between: /signin/oidc answers 503 once the metadata is due, many at once alike", async function () {
    this.timeout(180_000);
    const sub = await provider();
    // Back up: discovered again, and a person signs in.
    const first = createJar(stack.url);
    expect((await first.get(await atProvider(first, sub))).status).to.equal(303);
    await idp.stop();

    // The redirect itself does not reach the provider, and discovery is not repeated for each sign-in.
    const cached = await createJar(stack.url).get("/signin/oidc");
    expect(cached.status).to.equal(303);
    expect(cached.headers.get("location")!.startsWith(`http://127.0.0.1:${port}/`)).to.equal(true);

    stack.clock.advance(61_000);
    const pages = await Promise.all(Array.from({ length: 10 }, () => createJar(stack.url).get("/signin/oidc")));
    for (const res of pages) await expectOutagePage(res);
  });
});
