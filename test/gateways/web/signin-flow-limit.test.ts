import { randomInt } from "node:crypto";
import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { SIGNIN_FLOW_STARTS_PER_MINUTE } from "../../../core/identity/flow-starts.js";
import { createJar, createUser, formFields, signIn, stepUp, type Jar } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";
import { passkeyOptionsOf, softPasskey, type SoftPasskey } from "../../support/soft-passkey.js";
import { startSigninGateway, startStack, type TestStack } from "../../support/stack.js";

const LIMIT = SIGNIN_FLOW_STARTS_PER_MINUTE;
/** A documentation-range address of its own per call (the gateway trusts 127.0.0.1 to forward it). */
const address = () => `198.51.100.${randomInt(1, 255)}`;

/**
 * Passkey sign-ins started without a session write a flow row each: they are limited per client
 * address (behind a trusted proxy, the forwarded one), so a flood from one address stops writing
 * rows while a person on another address starts their flow and signs in.
 */
describe("web pages: sign-in flow starts are limited per client address", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let gateway: FastifyInstance;
  let url: string;
  let origin: string;

  before(async () => {
    stack = await startStack({ signinMethods: ["email", "passkey"], signinFlowStartsPerMinute: LIMIT });
    ({ gateway, url } = await startSigninGateway(stack, { trustProxy: ["127.0.0.1/32"] }));
    origin = new URL(stack.issuer).origin;
  });
  beforeEach(async () => {
    // Buckets live in the shared test database: start each test from empty ones.
    await stack.core.db.raw(`DELETE FROM rate_limit_logs WHERE key LIKE 'signin-flow-start:%'`);
  });
  after(async () => {
    await gateway?.close();
    await stack?.close();
  });

  /** A browser whose requests the trusted proxy forwards as coming from `from`. */
  function browserAt(from: string): Jar {
    const jar = createJar(url);
    const forwarded = { "x-forwarded-for": from };
    return {
      ...jar,
      get: (path: string) => jar.request(path, { headers: forwarded }),
      post: (path: string, form: Record<string, string | string[]>) => {
        const body = new URLSearchParams();
        for (const [k, v] of Object.entries(form)) for (const x of Array.isArray(v) ? v : [v]) body.append(k, x);
        return jar.request(path, { method: "POST", headers: { ...forwarded, "content-type": "application/x-www-form-urlencoded" }, body: body.toString() });
      },
    };
  }

  const flowRows = async () =>
    Number((await stack.core.db.raw(`SELECT count(*)::int AS n FROM signin_flows WHERE method = 'passkey' AND purpose = 'sign_in'`)).rows[0].n);

  /** A person with a passkey, added from `from` after signing in and stepping up by code. */
  async function personWithPasskey(from: string): Promise<{ key: SoftPasskey; jar: Jar }> {
    const site = { ...stack, url };
    const user = await createUser(stack);
    const jar = browserAt(from);
    await signIn(site, jar, user.email, "/dashboard/passkeys");
    await stepUp(site, jar, user.email, "/stepup?return_to=%2Fdashboard%2Fpasskeys%2Fadd");
    const page = await (await jar.get("/dashboard/passkeys/add")).text();
    const key = softPasskey();
    const added = await jar.post("/dashboard/passkeys/add", {
      ...formFields(page, "/dashboard/passkeys/add"),
      name: "laptop",
      response: key.create(passkeyOptionsOf(page), origin),
    });
    expect(added.status).to.equal(303);
    return { key, jar };
  }

  it(`hostile: a flood from one address is refused after ${LIMIT} starts with 429 and Retry-After, and writes no more rows`, async () => {
    const flooder = address();
    const before = await flowRows();
    for (let i = 0; i < LIMIT; i++) expect((await browserAt(flooder).get("/signin/passkey")).status, `start ${i + 1}`).to.equal(200);
    expect(await flowRows()).to.equal(before + LIMIT);
    for (let i = 0; i < 20; i++) {
      const refused = await browserAt(flooder).get("/signin/passkey");
      expect(refused.status).to.equal(429);
      expect(refused.headers.get("retry-after")).to.equal("60");
      expect(refused.headers.get("content-type")).to.match(/text\/html/);
      expect(refused.headers.getSetCookie().some((c) => /^vg_passkey(\.[\w-]+)?=[^;]/.test(c))).to.equal(false);
      expect(await refused.text()).to.include("too many sign-ins were started from your network in the last minute; try again in 60 seconds");
    }
    expect(await flowRows()).to.equal(before + LIMIT);
    stack.clock.advance(59_000);
    const last = await browserAt(flooder).get("/signin/passkey");
    expect(last.headers.get("retry-after")).to.equal("1");
    expect(await last.text()).to.include("try again in 1 second</p>");
    // Waiting out the window lets the address back in.
    stack.clock.advance(1_000);
    expect((await browserAt(flooder).get("/signin/passkey")).status).to.equal(200);
  });

  it("hostile: a flood moving between IPv6 addresses of one /64 is counted as one client; the next /64 is not", async () => {
    for (let i = 0; i < LIMIT; i++) expect((await browserAt(`2001:db8:a:b::${(i + 1).toString(16)}`).get("/signin/passkey")).status).to.equal(200);
    expect((await browserAt("2001:db8:a:b:ffff:ffff:ffff:fffe").get("/signin/passkey")).status).to.equal(429);
    expect((await browserAt("2001:db8:a:c::1").get("/signin/passkey")).status).to.equal(200);
  });

  it("a person on another address starts a passkey sign-in during the flood and is signed in", async () => {
    const home = address();
    let flooder = address();
    while (flooder === home) flooder = address();
    const { key } = await personWithPasskey(home);
    for (let i = 0; i < LIMIT + 5; i++) await browserAt(flooder).get("/signin/passkey");
    expect((await browserAt(flooder).get("/signin/passkey")).status).to.equal(429);
    const jar = browserAt(home);
    const page = await jar.get("/signin/passkey?return_to=%2Fdashboard%2Fpasskeys");
    expect(page.status).to.equal(200);
    const text = await page.text();
    const done = await jar.post("/signin/passkey", { ...formFields(text, "/signin/passkey"), response: key.get(passkeyOptionsOf(text), origin) });
    expect(done.status).to.equal(303);
    expect(done.headers.get("location")).to.equal("/dashboard/passkeys");
    expect((await jar.get("/dashboard/passkeys")).status).to.equal(200);
    // The flood is still refused while the person signs in.
    expect((await browserAt(flooder).get("/signin/passkey")).status).to.equal(429);
  });

  it("a signed-in person's passkey step-up is not counted against their address", async () => {
    const home = address();
    const { key, jar } = await personWithPasskey(home);
    for (let i = 0; i < LIMIT; i++) await browserAt(home).get("/signin/passkey");
    expect((await browserAt(home).get("/signin/passkey")).status).to.equal(429);
    const page = await jar.get("/stepup/passkey?return_to=%2Fdashboard%2Fagents");
    expect(page.status).to.equal(200);
    const text = await page.text();
    const done = await jar.post("/stepup/passkey", { ...formFields(text, "/stepup/passkey"), response: key.get(passkeyOptionsOf(text), origin) });
    expect(done.status).to.equal(303);
    expect(done.headers.get("location")).to.equal("/dashboard/agents");
  });

  it(`${LIMIT * 2} concurrent starts from one address: exactly ${LIMIT} write a row (PostgreSQL only)`, async function () {
    requirePostgres(this, "concurrent starts need several connections");
    const flooder = address();
    const before = await flowRows();
    const answers = await Promise.all(Array.from({ length: LIMIT * 2 }, () => browserAt(flooder).get("/signin/passkey")));
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 200)).to.have.length(LIMIT);
    expect(statuses.filter((s) => s === 429)).to.have.length(LIMIT);
    expect(await flowRows()).to.equal(before + LIMIT);
    // Another address is untouched by the flood.
    let other = address();
    while (other === flooder) other = address();
    expect((await browserAt(other).get("/signin/passkey")).status).to.equal(200);
  });

  it(`${LIMIT * 2} concurrent starts from as many addresses of one IPv6 /64: exactly ${LIMIT} write a row (PostgreSQL only)`, async function () {
    requirePostgres(this, "concurrent starts need several connections");
    const before = await flowRows();
    const answers = await Promise.all(Array.from({ length: LIMIT * 2 }, (_, i) => browserAt(`2001:db8:c:d::${(i + 1).toString(16)}`).get("/signin/passkey")));
    expect(answers.filter((a) => a.status === 200)).to.have.length(LIMIT);
    expect(answers.filter((a) => a.status === 429)).to.have.length(LIMIT);
    expect(await flowRows()).to.equal(before + LIMIT);
  });
});
