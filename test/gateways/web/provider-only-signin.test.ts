import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser } from "../../support/agent-oauth.js";
import { expectRefused } from "../../support/refusals.js";

/**
 * A deployment whose SIGNIN_METHODS leaves out email offers only its provider: the page shows
 * no code form, and core refuses the code RPCs even to a caller that skips the pages.
 */
describe("web pages: a deployment that signs in only at its provider", () => {
  let stack: TestStack;
  before(async function () {
    this.timeout(180_000);
    // The provider is never contacted here: only what the pages offer and core refuses.
    stack = await startStack({
      gateway: true,
      publicUrls: true,
      oidc: { issuer: "http://127.0.0.1:9", clientId: "vaultgate", clientSecret: "vaultgate-idp-secret", stepUpAcr: [] },
      signinMethods: ["oidc"],
    });
  });
  after(async () => {
    await stack?.close();
  });

  it("the sign-in page shows only the provider, no e-mail code form", async () => {
    const page = await (await createJar(stack.url).get("/signin")).text();
    expect(page).to.include("Sign in with your organisation");
    expect(page).not.to.include('action="/signin"');
    expect(page).not.to.include('name="email"');
  });

  it("a form posted to /signin anyway is a 403 page and no code is queued", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    await jar.get("/signin");
    const csrf = jar.cookies.get("vg_csrf")!;
    expect(csrf).to.be.a("string");
    const res = await jar.post("/signin", { csrf, return_to: "/dashboard", email: user.email });
    expect(res.status).to.equal(403);
    expect(res.headers.get("content-type")).to.match(/text\/html/);
    expect(await res.text()).not.to.match(/at .*\.ts:\d+/);
    const { messages } = await stack.admin.grants.listOutbox({ email: user.email });
    expect(messages).to.have.length(0);
  });

  it("core refuses both code RPCs to a caller that skips the pages", async () => {
    const user = await createUser(stack);
    const notOffered = /does not offer sign-in by e-mailed code/;
    await expectRefused(stack.clients.grants.startSignIn({ email: user.email }), Reason.ACCESS_DENIED, notOffered);
    await expectRefused(
      stack.clients.grants.completeSignIn({ challengeId: "00000000-0000-4000-8000-000000000000", code: "123456" }),
      Reason.ACCESS_DENIED,
      notOffered,
    );
    const { messages } = await stack.admin.grants.listOutbox({ email: user.email });
    expect(messages).to.have.length(0);
  });
});
