import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { createJar, createUser, formFields, signIn, stepUp, type Jar } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";
import { passkeyOptionsOf, softPasskey, type SoftPasskey } from "../../support/soft-passkey.js";
import { startSigninGateway, startStack, type TestStack } from "../../support/stack.js";

const LIMIT = 6;

/**
 * Step-ups (by code, passkey or provider) and passkey registrations name a session and write a row
 * each: they are limited per session (SIGNIN_FLOW_RATE_LIMIT_PER_MINUTE), so a stolen cookie stops
 * writing rows while another person's session, from the same address, still starts its step-up and completes it.
 */
describe("web pages: flow starts of a signed-in session are limited per session", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let gateway: FastifyInstance;
  let url: string;
  let origin: string;

  before(async () => {
    stack = await startStack({ signinMethods: ["email", "passkey"], signinFlowStartsPerMinute: LIMIT });
    ({ gateway, url } = await startSigninGateway(stack));
    origin = new URL(stack.issuer).origin;
    // Code sign-ins share the per-address bucket, and other suites sign in from 127.0.0.1 too.
    await stack.core.db.raw(`DELETE FROM rate_limit_logs WHERE key LIKE 'signin-flow-start:%'`);
  });
  after(async () => {
    await gateway?.close();
    await stack?.close();
  });

  /** A person with a passkey, added after signing in and stepping up by code (a step-up and a registration start). */
  async function personWithPasskey(): Promise<{ key: SoftPasskey; jar: Jar; userId: string }> {
    const site = { ...stack, url };
    const user = await createUser(stack);
    const jar = createJar(url);
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
    return { key, jar, userId: user.userId };
  }

  const flowsOf = async (userId: string) =>
    Number((await stack.core.db.raw(`SELECT count(*)::int AS n FROM signin_flows WHERE user_id = ?`, [userId])).rows[0].n);

  it(`hostile: one session's step-up and registration starts are refused after ${LIMIT} a minute with 429 and Retry-After; another person's are not`, async () => {
    const thief = await personWithPasskey();
    const honest = await personWithPasskey();
    // The code step-up and the registration above spent two of the thief's session's starts.
    for (let i = 2; i < LIMIT; i++) expect((await thief.jar.get("/stepup/passkey")).status, `start ${i + 1}`).to.equal(200);
    const rows = await flowsOf(thief.userId);
    for (const path of ["/stepup/passkey", "/dashboard/passkeys/add", "/stepup/passkey"]) {
      const refused = await thief.jar.get(path);
      expect(refused.status, path).to.equal(429);
      expect(refused.headers.get("retry-after")).to.equal("60");
      expect(refused.headers.get("content-type")).to.match(/text\/html/);
      expect(await refused.text()).to.include("too many confirmations were started in this session in the last minute; try again in 60 seconds");
    }
    expect(await flowsOf(thief.userId)).to.equal(rows);
    // The honest person, on the same address, steps up with their passkey during the flood.
    const page = await honest.jar.get("/stepup/passkey?return_to=%2Fdashboard%2Fagents");
    expect(page.status).to.equal(200);
    const text = await page.text();
    const done = await honest.jar.post("/stepup/passkey", { ...formFields(text, "/stepup/passkey"), response: honest.key.get(passkeyOptionsOf(text), origin) });
    expect(done.status).to.equal(303);
    expect(done.headers.get("location")).to.equal("/dashboard/agents");
    // A sign-in start from the thief's address (no session) is another bucket.
    expect((await createJar(url).get("/signin/passkey")).status).to.equal(200);
    // The minute over, the session may start again.
    stack.clock.advance(60_000);
    expect((await thief.jar.get("/stepup/passkey")).status).to.equal(200);
  });

  it(`${LIMIT * 4} concurrent starts from one session: exactly ${LIMIT} write a row (PostgreSQL only)`, async function () {
    requirePostgres(this, "concurrent starts need several connections");
    const { jar, userId } = await personWithPasskey();
    stack.clock.advance(60_000);
    const before = await flowsOf(userId);
    const answers = await Promise.all(Array.from({ length: LIMIT * 4 }, (_, i) => jar.get(i % 2 ? "/stepup/passkey" : "/dashboard/passkeys/add")));
    expect(answers.filter((a) => a.status === 200)).to.have.length(LIMIT);
    expect(answers.filter((a) => a.status === 429)).to.have.length(LIMIT * 3);
    expect(await flowsOf(userId)).to.equal(before + LIMIT);
  });
});
