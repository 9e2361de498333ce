import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, createJar, createUser, formFields, pkce, registerClient } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";

/**
 * E-mailed codes are limited per account (per purpose and per hour), bounding mail to one address
 * without locking out a person; the page says how long to wait, and unknown addresses look alike.
 */
describe("web pages: the sign-in code send limit", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack.close());

  async function send(email: string) {
    const jar = createJar(stack.url);
    const form = formFields(await (await jar.get("/signin")).text(), "/signin") as Record<string, string>;
    return jar.post("/signin", { ...form, email });
  }

  it("three authorizations with sign-in and step-up each, in fresh browsers half a minute apart, are not limited", async () => {
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
      stack.clock.advance(30_000);
    }
  });

  it("20 concurrent sends for one account send one code (PostgreSQL)", async function () {
    requirePostgres(this, "concurrent sends need several connections");
    const user = await createUser(stack);
    const answers = await Promise.all(Array.from({ length: 20 }, () => send(user.email)));
    expect(answers.map((a) => a.status).sort()).to.deep.equal([303, ...Array(19).fill(429)]);
    expect((await stack.admin.grants.listOutbox({ email: user.email })).messages).to.have.length(1);
  });

  for (const known of [true, false]) {
    const who = known ? "a known account" : "an unknown address";
    it(`${who}: a second code within 30 s is refused with the seconds to wait`, async () => {
      const email = known ? (await createUser(stack)).email : `nobody-${Date.now()}-${Math.random()}@example.com`;
      expect((await send(email)).status).to.equal(303);
      stack.clock.advance(10_000);
      const refused = await send(email);
      expect(refused.status).to.equal(429);
      expect(Number(refused.headers.get("retry-after"))).to.equal(20);
      expect(await refused.text()).to.match(/try again in 20 seconds/);
      stack.clock.advance(20_000);
      expect((await send(email)).status).to.equal(303);
    });

    it(`${who}: ten codes an hour, then the page says how many minutes to wait`, async () => {
      const email = known ? (await createUser(stack)).email : `nobody-${Date.now()}-${Math.random()}@example.com`;
      for (let i = 0; i < 10; i++) {
        expect((await send(email)).status, `code ${i + 1}`).to.equal(303);
        stack.clock.advance(30_000);
      }
      const refused = await send(email);
      expect(refused.status).to.equal(429);
      // The first of the ten was sent 300 s ago: it leaves the hour in 3300 s.
      expect(Number(refused.headers.get("retry-after"))).to.equal(3300);
      expect(await refused.text()).to.match(/try again in 55 minutes/);
      // A refused send starts no 30 s gap: it is the hour that still says no.
      expect(await (await send(email)).text()).to.match(/too many codes were sent to this address; try again in 55 minutes/);
      stack.clock.advance(3300_000);
      expect((await send(email)).status).to.equal(303);
    });
  }
});
