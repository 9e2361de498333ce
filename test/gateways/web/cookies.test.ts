import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { createInProcessTransport } from "../../../core/in-process-transport.js";
import { buildGateway } from "../../../gateways/app.js";
import { createCoreClients } from "../../../gateways/core-clients.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, signIn } from "../../support/agent-oauth.js";

/** A Set-Cookie line as name, value and attributes (lower-cased names, as browsers compare them). */
function parseSetCookie(line: string) {
  const [pair, ...rest] = line.split(";").map((p) => p.trim());
  const eq = pair!.indexOf("=");
  const attrs = new Map(rest.map((a) => [a.split("=")[0]!.toLowerCase(), a.includes("=") ? a.slice(a.indexOf("=") + 1) : ""]));
  return { name: pair!.slice(0, eq), value: pair!.slice(eq + 1), attrs };
}
const setCookies = (res: Response) => res.headers.getSetCookie().map(parseSetCookie);

/**
 * Session and CSRF cookies: `__Host-` names (Secure, Path=/, no Domain) when the public
 * app URL is https; the plain names without Secure on the plain-http default, where
 * browsers would refuse a Secure cookie.
 */
describe("web cookies follow the public URL's scheme", function () {
  this.timeout(30_000);
  let stack: TestStack;
  let httpsGateway: FastifyInstance;
  let httpsUrl: string;

  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
    // The same core behind a gateway whose public URLs are https (TLS ends in front of it,
    // as in a deployment); the test talks plain http to it directly.
    const origin = "https://app.vaultgate.test";
    httpsGateway = await buildGateway({
      clients: createCoreClients(createInProcessTransport(stack.core.routes, stack.core.interceptors), { gatewayToken: stack.gatewayToken }),
      logger: stack.logs.logger,
      urls: { issuer: stack.issuer, baseUrl: origin, authUrl: origin, appUrl: origin, mcpUrl: stack.mcpUrl },
    });
    await httpsGateway.listen({ port: 0, host: "127.0.0.1" });
    httpsUrl = `http://127.0.0.1:${(httpsGateway.server.address() as { port: number }).port}`;
  });
  after(async () => {
    await httpsGateway?.close();
    await stack?.close();
  });

  it("https APP_URL: __Host-vg_csrf and __Host-vg_session with Secure, Path=/ and no Domain; the __Host- session signs in", async () => {
    const user = await createUser(stack);
    const jar = createJar(httpsUrl);
    const form = await jar.get("/signin");
    const csrf = setCookies(form);
    expect(csrf.map((c) => c.name)).to.deep.equal(["__Host-vg_csrf"]);
    expect([...csrf[0]!.attrs.keys()].sort()).to.deep.equal(["httponly", "max-age", "path", "samesite", "secure"]);
    expect(csrf[0]!.attrs.get("path")).to.equal("/");
    expect(csrf[0]!.attrs.get("samesite")).to.equal("Lax");

    const fields = formFields(await form.text(), "/signin");
    const sent = await jar.post("/signin", { ...fields, email: user.email });
    expect(sent.status, "the __Host- CSRF cookie is the one checked").to.equal(303);
    const done = await signIn(stack, jar, user.email);
    const session = setCookies(done);
    expect(session.map((c) => c.name)).to.deep.equal(["__Host-vg_session", "__Host-vg_browser"]);
    expect(session[0]!.value).to.match(/^vgs_/);
    expect(session[1]!.value).to.match(/^vgb_/);
    for (const c of session) expect([...c.attrs.keys()].sort()).to.deep.equal(["httponly", "max-age", "path", "samesite", "secure"]);
    expect(session[1]!.attrs.get("max-age")).to.equal(String(180 * 86_400));
    expect(session[0]!.attrs.get("path")).to.equal("/");
    expect(jar.cookies.has("vg_session")).to.equal(false);

    const token = session[0]!.value;
    const signedIn = await fetch(`${httpsUrl}/dashboard/agents`, { headers: { cookie: `__Host-vg_session=${token}` }, redirect: "manual" });
    expect(signedIn.status).to.equal(200);
    expect(await signedIn.text()).to.include(user.email);

    // Sign-out clears the __Host- cookie in the same form (a browser drops it only then).
    const dash = await jar.get("/dashboard/agents");
    const out = await jar.post("/signout", formFields(await dash.text(), "/signout"));
    expect(out.status).to.equal(303);
    const cleared = setCookies(out);
    expect(cleared.map((c) => [c.name, c.value, c.attrs.get("max-age")])).to.deep.equal([["__Host-vg_session", "", "0"]]);
    expect(cleared[0]!.attrs.has("secure")).to.equal(true);
    expect(cleared[0]!.attrs.get("path")).to.equal("/");
  });

  it("hostile: over https a cookie under the plain name (as a sibling subdomain could plant) is not a session", async () => {
    const user = await createUser(stack);
    const jar = createJar(httpsUrl);
    await signIn(stack, jar, user.email);
    const token = jar.cookies.get("__Host-vg_session")!;
    expect(token).to.match(/^vgs_/);
    const plain = await fetch(`${httpsUrl}/dashboard/agents`, { headers: { cookie: `vg_session=${token}` }, redirect: "manual" });
    expect(plain.status).to.equal(303);
    expect(plain.headers.get("location")).to.match(/^\/signin\?/);
    // Nor does a plain vg_csrf cookie pass the signed-out double submit.
    const planted = "A".repeat(43);
    const post = await fetch(`${httpsUrl}/signin`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", cookie: `vg_csrf=${planted}` },
      body: new URLSearchParams({ csrf: planted, email: user.email, return_to: "/dashboard/agents" }).toString(),
      redirect: "manual",
    });
    expect(post.status).to.equal(403);
  });

  it("hostile: over https an action's notice is __Host-vg_notice; one planted under the plain name shows nothing", async () => {
    const user = await createUser(stack);
    const jar = createJar(httpsUrl);
    await signIn(stack, jar, user.email);
    const killed = await jar.post("/dashboard/kill-switch", formFields(await (await jar.get("/dashboard/agents")).text(), "/dashboard/kill-switch"));
    const notice = setCookies(killed).find((c) => c.name.endsWith("vg_notice"))!;
    expect([notice.name, notice.value.split(".")[0], notice.attrs.get("samesite"), notice.attrs.get("path")]).to.deep.equal([
      "__Host-vg_notice",
      "killed",
      "Strict",
      "/",
    ]);
    expect(notice.attrs.has("secure")).to.equal(true);
    expect(await (await jar.get("/dashboard/agents")).text()).to.include("Every grant was revoked.");
    jar.cookies.set("vg_notice", notice.value);
    expect(await (await jar.get("/dashboard/agents")).text()).to.not.include('class="card ok"');
  });

  it("plain-http default: vg_csrf, vg_session and vg_browser, Path=/, HttpOnly, SameSite=Lax, without Secure", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const csrf = setCookies(await jar.get("/signin"));
    expect(csrf.map((c) => c.name)).to.deep.equal(["vg_csrf"]);
    expect([...csrf[0]!.attrs.keys()].sort()).to.deep.equal(["httponly", "max-age", "path", "samesite"]);
    const session = setCookies(await signIn(stack, jar, user.email));
    expect(session.map((c) => c.name)).to.deep.equal(["vg_session", "vg_browser"]);
    for (const c of session) expect([...c.attrs.keys()].sort()).to.deep.equal(["httponly", "max-age", "path", "samesite"]);
    expect(session[0]!.attrs.get("path")).to.equal("/");
    const signedIn = await fetch(`${stack.url}/dashboard/agents`, { headers: { cookie: `vg_session=${session[0]!.value}` }, redirect: "manual" });
    expect(signedIn.status).to.equal(200);
  });
});
