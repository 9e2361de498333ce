import { expect } from "chai";
import { decodeProtectedHeader } from "jose";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, signIn } from "../../support/agent-oauth.js";
import { expectRefused } from "../../support/refusals.js";

/**
 * A sign-out handoff is signed like every other token: a replica whose key another replica retired
 * hands out none (a handoff no host accepts would leave the other host's session open unseen), and
 * still ends the session on its own host.
 */
describe("sign-out on a replica whose signing key another replica retired", function () {
  this.timeout(60_000);
  let a: TestStack;
  let b: TestStack;
  let app: string;
  let auth: string;

  beforeEach(async () => {
    // A rereads key states whenever asked (in service, once they are a second old).
    a = await startStack({ gateway: true, publicUrls: true, authHost: "localhost", keyStateTtlMs: 0, scrypt: { N: 1024, r: 8, p: 1 } });
    b = await startStack({});
    app = a.url;
    auth = app.replace("127.0.0.1", "localhost");
  });
  afterEach(async () => {
    await a?.close();
    await b?.close();
  });

  async function signedIn() {
    const jar = createJar(app);
    await signIn(a, jar, (await createUser(a)).email);
    const form = formFields(await (await jar.get("/dashboard/agents")).text(), "/signout");
    return { jar, form, token: jar.cookies.get("vg_session")! };
  }

  it("ends the session and goes to sign-in without a handoff, then hands off again once A is rotated", async () => {
    const before = await signedIn();
    await b.admin.grants.retireSigningKey({ kid: a.core.keyring.current()!.kid });

    const out = await before.jar.post("/signout", before.form);
    expect([out.status, out.headers.get("location")]).to.deep.equal([303, "/signin"]);
    await expectRefused(a.clients.grants.getSession({ sessionToken: before.token }), Reason.INVALID_TOKEN);

    const { kid } = await a.admin.grants.rotateSigningKey({});
    const after = await signedIn();
    const next = await after.jar.post("/signout", after.form);
    expect(next.status).to.equal(303);
    const location = new URL(next.headers.get("location")!);
    expect(location.origin + location.pathname).to.equal(`${auth}/signout/continue`);
    expect(decodeProtectedHeader(location.searchParams.get("handoff")!).kid).to.equal(kid);
  });

  it("the core RPC answers no handoff either, and still ends the session", async () => {
    const { token } = await signedIn();
    await b.admin.grants.retireSigningKey({ kid: a.core.keyring.current()!.kid });
    const answer = await a.clients.grants.endSession({ sessionToken: token });
    expect(answer.signoutHandoff).to.equal("");
    await expectRefused(a.clients.grants.getSession({ sessionToken: token }), Reason.INVALID_TOKEN);
  });
});
