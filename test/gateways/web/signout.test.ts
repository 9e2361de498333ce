import { expect } from "chai";
import { createGrpcTransport } from "@connectrpc/connect-node";
import type { FastifyInstance } from "fastify";
import { startCoreServer, type CoreServer } from "../../../core/server.js";
import { buildGateway } from "../../../gateways/app.js";
import { createCoreClients } from "../../../gateways/core-clients.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, signIn, type Jar } from "../../support/agent-oauth.js";
import { expectRefused } from "../../support/refusals.js";

/**
 * Sign-out ends the session in core and clears the cookie. When core cannot end it, the
 * page says the sign-out did not complete and keeps the cookie, so that trying again can
 * still end the session, rather than claiming a success that left the session usable.
 */
describe("sign-out", function () {
  this.timeout(30_000);
  let stack: TestStack;

  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack?.close());

  const getSession = (sessionToken: string) => stack.clients.grants.getSession({ sessionToken });

  async function signedIn(jar: Jar) {
    const user = await createUser(stack);
    await signIn(stack, jar, user.email);
    const token = jar.cookies.get("vg_session")!;
    const form = formFields(await (await jar.get("/dashboard/agents")).text(), "/signout");
    return { user, token, form };
  }

  it("ends the session in core, clears the cookie and goes to sign-in; a second sign-out with the old cookie is harmless", async () => {
    const jar = createJar(stack.url);
    const { token, form } = await signedIn(jar);
    expect((await getSession(token)).session).to.not.equal(undefined);
    const out = await jar.post("/signout", form);
    expect(out.status).to.equal(303);
    expect(out.headers.get("location")).to.equal("/signin");
    expect(out.headers.getSetCookie()).to.deep.equal(["vg_session=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0"]);
    await expectRefused(getSession(token), Reason.INVALID_TOKEN);
    const again = await fetch(`${stack.url}/signout`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", cookie: `vg_session=${token}` },
      body: new URLSearchParams(form as Record<string, string>).toString(),
      redirect: "manual",
    });
    expect([again.status, again.headers.get("location")]).to.deep.equal([303, "/signin"]);
  });

  it("hostile: a sign-out posted without the form's CSRF token ends nothing", async () => {
    const jar = createJar(stack.url);
    const { token } = await signedIn(jar);
    const forged = await jar.post("/signout", { csrf: "A".repeat(43) });
    expect(forged.status).to.equal(403);
    expect((await getSession(token)).session).to.not.equal(undefined);
  });

  describe("with core unreachable (split deployment)", () => {
    let coreServer: CoreServer;
    let gateway: FastifyInstance;
    let url: string;

    before(async () => {
      // Core on its own port and a gateway that reaches it over gRPC, as `--role gateway` does.
      coreServer = await startCoreServer(stack.core, 0, "127.0.0.1");
      gateway = await buildGateway({
        clients: createCoreClients(createGrpcTransport({ baseUrl: coreServer.url }), { gatewayToken: stack.gatewayToken }),
        logger: stack.logs.logger,
        urls: { issuer: stack.issuer, baseUrl: stack.url, authUrl: stack.url, appUrl: stack.url, mcpUrl: stack.mcpUrl },
      });
      await gateway.listen({ port: 0, host: "127.0.0.1" });
      url = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
    });
    after(async () => {
      await gateway?.close();
      await coreServer?.close();
    });

    it("EndSession fails: a 5xx page says the sign-out did not complete, keeps the cookie and offers to try again", async () => {
      const jar = createJar(url);
      const { token, form } = await signedIn(jar);
      await coreServer.close();
      const out = await jar.post("/signout", form);
      expect(out.status).to.equal(503);
      expect(out.headers.get("location")).to.equal(null);
      expect(out.headers.get("content-type")).to.match(/^text\/html/);
      const text = await out.text();
      expect(text).to.include("Sign-out did not complete");
      expect(text).to.include("you are still signed in");
      expect(formFields(text, "/signout").csrf).to.equal(form.csrf);
      expect(out.headers.getSetCookie().some((c) => c.startsWith("vg_session=;"))).to.equal(false);
      expect(jar.cookies.get("vg_session")).to.equal(token);
      // The page told the truth: the session was not ended.
      expect((await getSession(token)).session).to.not.equal(undefined);
    });
  });
});
