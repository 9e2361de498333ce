import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { createInProcessTransport } from "../../../core/in-process-transport.js";
import { buildGateway } from "../../../gateways/app.js";
import { createCoreClients } from "../../../gateways/core-clients.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, signIn, stepUp, type Jar } from "../../support/agent-oauth.js";
import { passkeyOptionsOf, softPasskey, type SoftPasskey } from "../../support/soft-passkey.js";

const APP = "https://app.vaultgate.test";

/**
 * Passkey ceremonies behind an https public URL (TLS ends in front of the gateway): the flow's
 * cookie is a __Host- name like the session's, so one a sibling subdomain plants cannot shadow it.
 */
describe("web pages: passkey flow cookie over https", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let gateway: FastifyInstance;
  let url: string;

  before(async function () {
    this.timeout(180_000);
    stack = await startStack({ appUrl: APP, signinMethods: ["email", "passkey"], scrypt: { N: 1024, r: 8, p: 1 } });
    gateway = await buildGateway({
      clients: createCoreClients(createInProcessTransport(stack.core.routes, stack.core.interceptors), { gatewayToken: stack.gatewayToken }),
      logger: stack.logs.logger,
      urls: { issuer: stack.issuer, baseUrl: APP, authUrl: APP, appUrl: APP, mcpUrl: stack.mcpUrl },
      signinMethods: ["email", "passkey"],
    });
    await gateway.listen({ port: 0, host: "127.0.0.1" });
    url = `http://127.0.0.1:${(gateway.server.address() as { port: number }).port}`;
  });
  after(async () => {
    await gateway?.close();
    await stack?.close();
  });

  /** A person with a passkey added through the pages. */
  async function owner(): Promise<{ jar: Jar; key: SoftPasskey }> {
    const user = await createUser(stack);
    const jar = createJar(url);
    await signIn(stack, jar, user.email, "/dashboard/passkeys");
    await stepUp(stack, jar, user.email, "/stepup?return_to=%2Fdashboard%2Fpasskeys%2Fadd");
    const add = await jar.get("/dashboard/passkeys/add");
    const set = add.headers.getSetCookie().map((line) => line.split(";").map((p) => p.trim()));
    const flow = set.find((parts) => parts[0]!.includes("vg_passkey."))!;
    expect(flow[0]!.split("=")[0]).to.match(/^__Host-vg_passkey\.[\w-]{16}$/);
    expect(flow.slice(1)).to.include.members(["Path=/", "Secure", "HttpOnly", "SameSite=Strict"]);
    const page = await add.text();
    const key = softPasskey();
    const done = await jar.post("/dashboard/passkeys/add", {
      ...formFields(page, "/dashboard/passkeys/add"),
      name: "phone",
      response: key.create(passkeyOptionsOf(page), APP),
    });
    expect(done.status).to.equal(303);
    return { jar, key };
  }

  it("sets __Host-vg_passkey (Secure, Path=/) for adding a passkey and for signing in with one", async () => {
    await owner();
    const res = await createJar(url).get("/signin/passkey");
    const key = formFields(await res.text(), "/signin/passkey").flow;
    expect(res.headers.getSetCookie().map((line) => line.split("=")[0])).to.include(`__Host-vg_passkey.${key}`);
  });

  it("hostile: a flow cookie planted under the plain name, sent first, does not spoil the person's passkey sign-in", async () => {
    const { key } = await owner();
    // The attacker's own flow, planted for the sign-in path as a sibling subdomain could.
    const attacker = createJar(url);
    const attackerKey = formFields(await (await attacker.get("/signin/passkey")).text(), "/signin/passkey").flow;
    const planted = attacker.cookies.get(`__Host-vg_passkey.${attackerKey}`)!;
    expect(planted).to.be.a("string");
    const person = createJar(url);
    const page = await (await person.get("/signin/passkey")).text();
    // Under the plain name of the person's own ceremony (its key is on their page), sent first.
    const personKey = formFields(page, "/signin/passkey").flow;
    const cookie = [`vg_passkey.${personKey}=${planted}`, ...[...person.cookies].map(([k, v]) => `${k}=${v}`)].join("; ");
    const body = new URLSearchParams({ ...(formFields(page, "/signin/passkey") as Record<string, string>), response: key.get(passkeyOptionsOf(page), APP) });
    const res = await fetch(`${url}/signin/passkey`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", cookie },
      body: body.toString(),
      redirect: "manual",
    });
    expect(res.status).to.equal(303);
    expect(res.headers.getSetCookie().some((c) => c.startsWith("__Host-vg_session=vgs_"))).to.equal(true);
  });
});
