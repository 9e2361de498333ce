import { randomBytes, randomInt } from "node:crypto";
import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { SIGNIN_FLOW_STARTS_PER_MINUTE } from "../../../core/identity/flow-starts.js";
import { createJar, createUser, formFields, signIn, stepUp, type Jar } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";
import { startSigninGateway, startStack, type TestStack } from "../../support/stack.js";

const LIMIT = SIGNIN_FLOW_STARTS_PER_MINUTE;
const NETWORK_REFUSAL = "too many sign-ins were started from your network in the last minute; try again in 60 seconds";
const nobody = () => `nobody-${randomBytes(5).toString("hex")}@example.com`;

/**
 * Code sign-ins write a challenge row per start, for unknown addresses too, and mail known
 * ones: they share the per-address flow-start limit, so one address varying the e-mail
 * address is refused past it, while a person on another address still gets a code.
 */
describe("web pages: code sign-in starts are limited per client address", function () {
  this.timeout(120_000);
  let stack: TestStack;
  let gateway: FastifyInstance;
  let url: string;
  const used = new Set<string>();

  before(async () => {
    stack = await startStack({ signinFlowStartsPerMinute: LIMIT });
    ({ gateway, url } = await startSigninGateway(stack, { signinMethods: ["email"], trustProxy: ["127.0.0.1/32"] }));
  });
  after(async () => {
    await gateway?.close();
    await stack?.close();
  });

  /** A documentation-range address no other test of this file used (the gateway trusts 127.0.0.1 to forward it). */
  function address(): string {
    for (;;) {
      const a = `198.51.100.${randomInt(1, 255)}`;
      if (!used.has(a)) {
        used.add(a);
        return a;
      }
    }
  }

  /** A browser whose requests the trusted proxy forwards as coming from `from`, holding the sign-in form. */
  async function browserAt(from: string) {
    const jar = createJar(url);
    const forwarded = { "x-forwarded-for": from };
    const fields = formFields(await (await jar.request("/signin", { headers: forwarded })).text(), "/signin");
    const post = (path: string, form: Record<string, string | string[]>) => {
      const body = new URLSearchParams();
      for (const [k, v] of Object.entries(form)) for (const x of Array.isArray(v) ? v : [v]) body.append(k, x);
      return jar.request(path, { method: "POST", headers: { ...forwarded, "content-type": "application/x-www-form-urlencoded" }, body: body.toString() });
    };
    const browser: Jar & { start: (email: string) => Promise<Response> } = {
      ...jar,
      get: (path: string) => jar.request(path, { headers: forwarded }),
      post,
      start: async (email: string) => {
        const res = await post("/signin", { ...fields, email });
        await res.arrayBuffer();
        return res;
      },
    };
    return browser;
  }

  const challenges = async (emails: string[]) => Number((await stack.core.db("signin_challenges").whereIn("account", emails).count({ n: "*" }))[0]!.n);
  const mailsTo = async (email: string) => (await stack.admin.grants.listOutbox({ email })).messages.length;

  it(`hostile: one address varying the e-mail address is refused after ${LIMIT} starts with 429 and Retry-After, writing and mailing nothing more`, async () => {
    const flooder = await browserAt(address());
    const known = await Promise.all(Array.from({ length: 3 }, () => createUser(stack)));
    const accepted = Array.from({ length: LIMIT }, (_, i) => (i % 10 === 0 ? known[i / 10]!.email : nobody()));
    for (const [i, email] of accepted.entries()) expect((await flooder.start(email)).status, `start ${i + 1}`).to.equal(303);
    expect(await challenges(accepted)).to.equal(LIMIT);
    for (const k of known) expect(await mailsTo(k.email)).to.equal(1);

    const more = await Promise.all(Array.from({ length: 5 }, () => createUser(stack)));
    const refusedEmails = [...more.map((u) => u.email), ...Array.from({ length: 15 }, nobody)];
    for (const email of refusedEmails) {
      const form = await (async () => {
        const res = await flooder.post("/signin", { ...formFields(await (await flooder.get("/signin")).text(), "/signin"), email });
        return { res, text: await res.text() };
      })();
      expect(form.res.status, email).to.equal(429);
      expect(form.res.headers.get("retry-after")).to.equal("60");
      expect(form.res.headers.get("content-type")).to.match(/text\/html/);
      expect(form.text).to.include(NETWORK_REFUSAL);
    }
    expect(await challenges(refusedEmails)).to.equal(0);
    for (const u of more) expect(await mailsTo(u.email)).to.equal(0);

    stack.clock.advance(59_000);
    const last = await flooder.post("/signin", { ...formFields(await (await flooder.get("/signin")).text(), "/signin"), email: nobody() });
    expect(last.status).to.equal(429);
    expect(last.headers.get("retry-after")).to.equal("1");
    // Waiting out the minute lets the address back in.
    stack.clock.advance(1_000);
    expect((await flooder.start(nobody())).status).to.equal(303);
  });

  it("unknown and known addresses spend the limit alike, and their refusals look alike", async () => {
    const known = await Promise.all(Array.from({ length: LIMIT + 1 }, () => createUser(stack)));
    // Unknown addresses fill one client's minute: a known account's start is then refused.
    const a = await browserAt(address());
    for (let i = 0; i < LIMIT; i++) expect((await a.start(nobody())).status).to.equal(303);
    const knownRefused = await a.post("/signin", { ...formFields(await (await a.get("/signin")).text(), "/signin"), email: known[LIMIT]!.email });
    expect(knownRefused.status).to.equal(429);
    expect(await mailsTo(known[LIMIT]!.email)).to.equal(0);
    // Known accounts fill another client's minute: an unknown address's start is then refused.
    const b = await browserAt(address());
    for (let i = 0; i < LIMIT; i++) expect((await b.start(known[i]!.email)).status).to.equal(303);
    const unknownRefused = await b.post("/signin", { ...formFields(await (await b.get("/signin")).text(), "/signin"), email: nobody() });
    expect(unknownRefused.status).to.equal(429);
    expect(unknownRefused.headers.get("retry-after")).to.equal(knownRefused.headers.get("retry-after"));
    const page = (r: Response) => r.text().then((t) => t.replace(/value="[^"]*"/g, ""));
    expect(await page(unknownRefused)).to.equal(await page(knownRefused));
  });

  it("a refusal by the per-e-mail limits or by bad input spends no start, and keeps its own message", async () => {
    const client = await browserAt(address());
    const person = await createUser(stack);
    expect((await client.start(person.email)).status).to.equal(303);
    for (let i = 0; i < 5; i++) {
      const again = await client.post("/signin", { ...formFields(await (await client.get("/signin")).text(), "/signin"), email: person.email });
      expect(again.status).to.equal(429);
      expect(await again.text()).to.include("a code was sent to this address moments ago; try again in 30 seconds");
      expect((await client.start("not an address")).status).to.equal(400);
    }
    // Nothing above but the first start was written, so the rest of the minute is still there.
    for (let i = 1; i < LIMIT; i++) expect((await client.start(nobody())).status, `start ${i + 1}`).to.equal(303);
    expect((await client.start(nobody())).status).to.equal(429);
  });

  it("a person on another address gets a code and signs in during the flood", async () => {
    const flooder = await browserAt(address());
    for (let i = 0; i < LIMIT + 5; i++) await flooder.start(nobody());
    expect((await flooder.start(nobody())).status).to.equal(429);
    const person = await createUser(stack);
    const jar = await browserAt(address());
    const done = await signIn({ ...stack, url }, jar, person.email, "/dashboard/agents");
    expect(done.status).to.equal(303);
    expect(done.headers.get("location")).to.equal("/dashboard/agents");
    expect((await jar.get("/dashboard/agents")).status).to.equal(200);
    // The flood is still refused while the person signs in.
    expect((await flooder.start(nobody())).status).to.equal(429);
  });

  it("a person in a browser they signed in with before gets a code and signs in behind the flooder's own address", async () => {
    const office = address();
    const person = await createUser(stack);
    const earlier = await browserAt(office);
    await signIn({ ...stack, url }, earlier, person.email, "/dashboard/agents");
    const marks = [...earlier.cookies].filter(([name]) => name.includes("vg_browser"));
    expect(marks, "a sign-in leaves a known-browser mark").to.have.length(1);
    const flooder = await browserAt(office);
    for (let i = 0; i < LIMIT; i++) await flooder.start(nobody());
    expect((await flooder.start(nobody())).status).to.equal(429);

    const returning = await browserAt(office);
    for (const [name, value] of marks) returning.cookies.set(name, value);
    const done = await signIn({ ...stack, url }, returning, person.email, "/dashboard/agents");
    expect(done.headers.get("location")).to.equal("/dashboard/agents");
    // A browser without the mark, and the flooder, are still refused there.
    expect((await (await browserAt(office)).start(person.email)).status).to.equal(429);
    expect((await flooder.start(nobody())).status).to.equal(429);
  });

  it("hostile: a known-browser mark spares only its own account's starts, never another address's", async () => {
    const own = await createUser(stack);
    const signedIn = await browserAt(address());
    await signIn({ ...stack, url }, signedIn, own.email, "/dashboard/agents");
    const flooder = await browserAt(address());
    for (const [name, value] of signedIn.cookies) if (name.includes("vg_browser")) flooder.cookies.set(name, value);
    const victim = await createUser(stack);
    for (let i = 0; i < LIMIT; i++) expect((await flooder.start(nobody())).status, `start ${i + 1}`).to.equal(303);
    expect((await flooder.start(nobody())).status).to.equal(429);
    expect((await flooder.start(victim.email)).status).to.equal(429);
    expect(await mailsTo(victim.email)).to.equal(0);
    stack.clock.advance(31_000); // past the mark's own 30 s send gap, within the minute
    expect((await flooder.start(own.email)).status, "its own account, on the browser's own budget").to.equal(303);
    expect((await flooder.start(victim.email)).status).to.equal(429);
  });

  it("20 concurrent starts from a known browser for its own account mail one code: its own budget still holds (PostgreSQL only)", async function () {
    requirePostgres(this, "concurrent starts need several connections");
    const person = await createUser(stack);
    const signedIn = await browserAt(address());
    await signIn({ ...stack, url }, signedIn, person.email, "/dashboard/agents");
    stack.clock.advance(31_000);
    const before = await mailsTo(person.email);
    const returning = await browserAt(address());
    for (const [name, value] of signedIn.cookies) if (name.includes("vg_browser")) returning.cookies.set(name, value);
    const statuses = (await Promise.all(Array.from({ length: 20 }, () => returning.start(person.email)))).map((r) => r.status);
    expect(statuses.filter((st) => st === 303)).to.have.length(1);
    expect(statuses.filter((st) => st === 429)).to.have.length(19);
    expect(await mailsTo(person.email)).to.equal(before + 1);
  });

  it("a signed-in person's code step-up is counted against their session, not their address", async () => {
    const home = address();
    const person = await createUser(stack);
    const jar = await browserAt(home);
    await signIn({ ...stack, url }, jar, person.email, "/dashboard/agents");
    const flooder = await browserAt(home);
    for (let i = 0; i < LIMIT; i++) await flooder.start(nobody());
    expect((await flooder.start(nobody())).status).to.equal(429);
    const done = await stepUp({ ...stack, url }, jar, person.email, "/stepup?return_to=%2Fdashboard%2Fagents");
    expect(done.status).to.equal(303);
    expect(done.headers.get("location")).to.equal("/dashboard/agents");
  });

  it(`${LIMIT * 2} concurrent starts from one address for as many addresses: exactly ${LIMIT} write a challenge (PostgreSQL only)`, async function () {
    requirePostgres(this, "concurrent starts need several connections");
    const flooder = await browserAt(address());
    const known = await Promise.all(Array.from({ length: 10 }, () => createUser(stack)));
    const emails = Array.from({ length: LIMIT * 2 }, (_, i) => (i % 6 === 0 ? known[i / 6]!.email : nobody()));
    const statuses = (await Promise.all(emails.map((e) => flooder.start(e)))).map((r) => r.status);
    expect(statuses.filter((s) => s === 303)).to.have.length(LIMIT);
    expect(statuses.filter((s) => s === 429)).to.have.length(LIMIT);
    expect(await challenges(emails)).to.equal(LIMIT);
    let mailed = 0;
    for (const k of known) mailed += await mailsTo(k.email);
    expect(mailed).to.equal(emails.filter((e, i) => known.some((k) => k.email === e) && statuses[i] === 303).length);
    // Another address is untouched by the flood.
    expect((await (await browserAt(address())).start(nobody())).status).to.equal(303);
  });
});
