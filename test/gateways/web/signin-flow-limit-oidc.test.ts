import { randomInt } from "node:crypto";
import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { SIGNIN_FLOW_STARTS_PER_MINUTE } from "../../../core/identity/flow-starts.js";
import { createJar, createUser, signIn } from "../../support/agent-oauth.js";
import { startIdp, type TestIdp } from "../../support/oidc-idp.js";
import { freePort } from "../../support/ports.js";
import { startSigninGateway, startStack, type TestStack } from "../../support/stack.js";

const LIMIT = SIGNIN_FLOW_STARTS_PER_MINUTE;

/**
 * Provider sign-ins started without a session share the per-address limit of passkey starts,
 * and only a start that writes a flow counts: an unreachable provider's 503 spends nothing.
 */
describe("web pages: provider sign-in starts are limited per client address", function () {
  this.timeout(120_000);
  let stack: TestStack;
  let idp: TestIdp;
  let gateway: FastifyInstance;
  let url: string;

  before(async () => {
    const port = await freePort();
    stack = await startStack({
      signinMethods: ["oidc", "email", "passkey"],
      signinFlowStartsPerMinute: LIMIT,
      oidc: { issuer: `http://127.0.0.1:${port}`, clientId: "vaultgate", clientSecret: "vaultgate-idp-secret", stepUpAcr: [] },
    });
    idp = await startIdp({ redirectUris: [`${stack.issuer}/signin/oidc/callback`], port });
    ({ gateway, url } = await startSigninGateway(stack, { signinMethods: ["oidc", "email", "passkey"], trustProxy: ["127.0.0.1/32"] }));
    await stack.core.db.raw(`DELETE FROM rate_limit_logs WHERE key LIKE 'signin-flow-start:%'`);
  });
  after(async () => {
    await gateway?.close();
    await stack?.close();
    await idp?.stop();
  });

  const from = (address: string, path: string) => fetch(url + path, { headers: { "x-forwarded-for": address }, redirect: "manual" });
  const oidcRows = async () => Number((await stack.core.db.raw(`SELECT count(*)::int AS n FROM signin_flows WHERE method = 'oidc'`)).rows[0].n);

  it(`hostile: an unreachable provider spends nothing; then ${LIMIT} starts go to the provider, the next are 429 pages, no row written`, async () => {
    const flooder = `192.0.2.${randomInt(1, 255)}`;
    // Down before the first discovery: every start is the 503 page and writes no flow.
    await idp.setDown(true);
    try {
      for (let i = 0; i < 5; i++) expect((await from(flooder, "/signin/oidc")).status).to.equal(503);
    } finally {
      await idp.setDown(false);
    }
    const before = await oidcRows();
    for (let i = 0; i < LIMIT; i++) {
      const res = await from(flooder, "/signin/oidc");
      expect(res.status, `start ${i + 1}`).to.equal(303);
      expect(res.headers.get("location")!.startsWith(idp.issuer)).to.equal(true);
    }
    expect(await oidcRows()).to.equal(before + LIMIT);
    const refused = await from(flooder, "/signin/oidc");
    expect(refused.status).to.equal(429);
    expect(Number(refused.headers.get("retry-after"))).to.be.within(1, 60);
    expect(await refused.text()).to.include("too many sign-ins were started from your network");
    // Passkey starts from that address share its bucket.
    expect((await from(flooder, "/signin/passkey")).status).to.equal(429);
    expect(await oidcRows()).to.equal(before + LIMIT);
    // Another address still goes to the provider.
    expect((await from(`203.0.113.${randomInt(1, 255)}`, "/signin/oidc")).status).to.equal(303);
  });

  it(`hostile: one session's provider step-ups are refused after ${LIMIT} a minute, writing no row; another person's session still steps up`, async () => {
    const session = async () => {
      const user = await createUser(stack);
      const jar = createJar(url);
      await signIn({ ...stack, url }, jar, user.email);
      return { jar, userId: user.userId };
    };
    const thief = await session();
    const honest = await session();
    const rows = async () => Number((await stack.core.db.raw(`SELECT count(*)::int AS n FROM signin_flows WHERE user_id = ?`, [thief.userId])).rows[0].n);
    for (let i = 0; i < LIMIT; i++) expect((await thief.jar.get("/signin/oidc?step_up=1")).status, `start ${i + 1}`).to.equal(303);
    expect(await rows()).to.equal(LIMIT);
    const refused = await thief.jar.get("/signin/oidc?step_up=1");
    expect(refused.status).to.equal(429);
    // This stack's clock follows real time (the provider checks it), so the starts took some of the minute.
    expect(Number(refused.headers.get("retry-after"))).to.be.within(1, 60);
    expect(await refused.text()).to.include("too many confirmations were started in this session");
    expect(await rows()).to.equal(LIMIT);
    const other = await honest.jar.get("/signin/oidc?step_up=1");
    expect(other.status).to.equal(303);
    expect(other.headers.get("location")!.startsWith(idp.issuer)).to.equal(true);
  });
});
