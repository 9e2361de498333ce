import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { createInProcessTransport } from "../../../core/in-process-transport.js";
import { buildGateway } from "../../../gateways/app.js";
import { createCoreClients } from "../../../gateways/core-clients.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser } from "../../support/agent-oauth.js";
import { startIdp, type TestIdp } from "../../support/oidc-idp.js";
import { freePort } from "../../support/ports.js";

const APP = "https://app.vaultgate.test";

/**
 * Provider sign-in behind an https public URL (TLS ends in front of the gateway): the flow's cookies
 * are __Host- names, so one a sibling subdomain plants cannot sign a person in to another account.
 */
describe("web pages: provider sign-in cookies over https", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let idp: TestIdp;
  let gateway: FastifyInstance;
  let url: string;

  before(async function () {
    this.timeout(180_000);
    const port = await freePort();
    stack = await startStack({
      appUrl: APP,
      oidc: { issuer: `http://127.0.0.1:${port}`, clientId: "vaultgate", clientSecret: "vaultgate-idp-secret", stepUpAcr: [] },
    });
    idp = await startIdp({ redirectUris: [`${APP}/signin/oidc/callback`], port });
    gateway = await buildGateway({
      clients: createCoreClients(createInProcessTransport(stack.core.routes, stack.core.interceptors), { gatewayToken: stack.gatewayToken }),
      logger: stack.logs.logger,
      urls: { issuer: stack.issuer, baseUrl: APP, authUrl: APP, appUrl: APP, mcpUrl: stack.mcpUrl },
      signinMethods: ["oidc", "email"],
    });
    await gateway.listen({ port: 0, host: "127.0.0.1" });
    url = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
  });
  after(async () => {
    await gateway?.close();
    await stack?.close();
    await idp?.stop();
  });

  /** An account at the provider, and the callback address its sign-in ends at, as served by our gateway. */
  async function providerCallback(location: string) {
    const user = await createUser(stack);
    const sub = `https-${user.userId.slice(0, 8)}`;
    await idp.addAccount({ sub, email: user.email, email_verified: true });
    const callback = await idp.signIn(location, sub);
    expect(callback.startsWith(`${APP}/signin/oidc/callback?`)).to.equal(true);
    return { user, path: callback.slice(APP.length) };
  }

  it("sets __Host-vg_oidc and __Host-vg_oidc_return named by the flow (Secure, Path=/) and signs the person in at the callback", async () => {
    const jar = createJar(url);
    const go = await jar.get(`/signin/oidc?return_to=${encodeURIComponent("/dashboard/money")}`);
    expect(go.status).to.equal(303);
    const key = new URL(go.headers.get("location")!).searchParams.get("state")!.slice(0, 16);
    const set = go.headers.getSetCookie().map((line) => line.split(";").map((p) => p.trim()));
    expect(set.map((parts) => parts[0]!.split("=")[0])).to.deep.equal([`__Host-vg_oidc.${key}`, `__Host-vg_oidc_return.${key}`]);
    for (const parts of set) expect(parts.slice(1)).to.include.members(["Path=/", "Secure", "HttpOnly", "SameSite=Lax"]);
    const { path } = await providerCallback(go.headers.get("location")!);
    const back = await jar.get(path);
    expect(back.status).to.equal(303);
    expect(back.headers.get("location")).to.equal("/dashboard/money");
    expect(jar.cookies.has("__Host-vg_session")).to.equal(true);
  });

  it("a flow secret planted under the plain name (as a sibling subdomain can) signs nobody in", async () => {
    const attacker = createJar(url);
    const go = await attacker.get("/signin/oidc");
    const key = new URL(go.headers.get("location")!).searchParams.get("state")!.slice(0, 16);
    const secret = attacker.cookies.get(`__Host-vg_oidc.${key}`)!;
    expect(secret).to.be.a("string");
    const { path } = await providerCallback(go.headers.get("location")!);
    const victim = createJar(url);
    victim.cookies.set(`vg_oidc.${key}`, secret);
    const res = await victim.get(path);
    expect(res.status).to.equal(403);
    expect(victim.cookies.has("__Host-vg_session")).to.equal(false);
    expect(victim.cookies.has("vg_session")).to.equal(false);
  });
});
