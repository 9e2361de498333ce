import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, createJar, createUser, formFields, pkce, registerClient } from "../../support/agent-oauth.js";

/**
 * The e-mailed code limit bounds mail to one address without locking out a person: three
 * authorizations that each need sign-in and step-up (six codes) go through, and past the
 * limit the page says how long to wait and sends Retry-After.
 */
describe("web pages: the sign-in code limit", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack.close());

  it("three authorizations with sign-in and step-up each, in fresh browsers, are not locked out", async () => {
    const user = await createUser(stack);
    const reg = await registerClient(stack);
    for (let i = 0; i < 3; i++) {
      const jar = createJar(stack.url);
      const { challenge } = pkce();
      const landed = await authorize(stack, jar, user.email, {
        response_type: "code",
        client_id: reg.body.client_id,
        redirect_uri: "http://127.0.0.1:9/callback",
        code_challenge: challenge,
        code_challenge_method: "S256",
        scope: "accounts:read payments:initiate",
        resource: `urn:vaultgate:vault:${user.vaultId}`,
        state: `s${i}`,
      });
      expect(landed.searchParams.get("code"), `authorization ${i + 1}`).to.match(/^vgc_/);
    }
  });

  it("past the limit the page says how many minutes to wait and sends Retry-After", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    let last: Response | undefined;
    for (let i = 0; i < 11; i++) {
      const form = formFields(await (await jar.get("/signin")).text(), "/signin") as Record<string, string>;
      last = await jar.post("/signin", { ...form, email: user.email });
      if (i < 10) expect(last.status, `code ${i + 1}`).to.equal(303);
    }
    expect(last!.status).to.equal(429);
    const retryAfter = Number(last!.headers.get("retry-after"));
    expect(retryAfter).to.be.within(1, 600);
    expect(await last!.text()).to.match(/try again in (10|9) minutes/);
    // The wait is real: after the window the next code is sent.
    stack.clock.advance(601_000);
    const form = formFields(await (await jar.get("/signin")).text(), "/signin") as Record<string, string>;
    expect((await jar.post("/signin", { ...form, email: user.email })).status).to.equal(303);
  });
});
