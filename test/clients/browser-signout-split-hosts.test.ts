import { expect } from "chai";
import { launchPhoneBrowser, requireChromium, signInOnPage } from "../support/browser.js";
import { startStack, type TestStack } from "../support/stack.js";
import { createUser, latestCode } from "../support/agent-oauth.js";

/**
 * APP_URL (127.0.0.1), AUTH_URL (localhost) and BASE_URL (127.0.0.2) on one gateway: Chromium
 * keeps a session cookie per host, and "Sign out" on any host signs the person out of all,
 * landing on sign-in where they pressed it.
 */
describe("browser: sign-out on one host of a split deployment signs out of both", function () {
  this.timeout(120_000);
  let stack: TestStack;
  let app: string;
  let auth: string;
  let third: string;

  before(async function () {
    requireChromium(this);
    stack = await startStack({ gateway: true, publicUrls: true, authHost: "localhost", baseHost: "127.0.0.2", scrypt: { N: 1024, r: 8, p: 1 } });
    app = stack.url;
    auth = app.replace("127.0.0.1", "localhost");
    third = app.replace("127.0.0.1", "127.0.0.2");
  });
  after(() => stack?.close());

  for (const [name, from, ...to] of [
    ["APP_URL's host", () => app, () => auth],
    ["AUTH_URL's host", () => auth, () => app],
    ["BASE_URL's host", () => third, () => app, () => auth],
  ] as const) {
    it(`signs in on each host with e-mailed codes, signs out on ${name}, and every other host asks for sign-in`, async () => {
      const user = await createUser(stack);
      const code = () => latestCode(stack, user.email);
      const browser = await launchPhoneBrowser();
      try {
        const page = await browser.context.newPage();
        for (const base of [from(), ...to.map((url) => url())]) {
          await page.goto(`${base}/signin`);
          await signInOnPage(page, user.email, code);
          expect(page.url()).to.equal(`${base}/dashboard/agents`);
          // One code per 30 s per person: the second host's sign-in waits on the test clock.
          stack.clock.advance(31_000);
        }
        await page.goto(`${from()}/dashboard/agents`);
        expect(page.url()).to.equal(`${from()}/dashboard/agents`);

        await page.click("form[action='/signout'] button[type=submit]");
        expect(page.url()).to.equal(`${from()}/signin`);

        for (const base of [...to.map((url) => url()), from()]) {
          await page.goto(`${base}/dashboard/agents`);
          expect(new URL(page.url()).origin + new URL(page.url()).pathname, base).to.equal(`${base}/signin`);
          expect(await page.isVisible("#email")).to.equal(true);
        }
      } finally {
        await browser.close();
      }
    });
  }
});
