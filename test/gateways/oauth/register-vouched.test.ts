import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { CLIENT_ADDRESS_HEADER, GATEWAY_CREDENTIAL_HEADER } from "../../../core/context.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { registerClient } from "../../support/agent-oauth.js";
import { expectRefused } from "../../support/refusals.js";

const metadata = { clientName: "Limited", redirectUris: ["http://127.0.0.1:9/callback"], scope: "accounts:read" };

/**
 * Registration is limited per client address, believed only from a gateway with the gateway
 * credential; every direct caller shares one bucket whatever address it claims.
 */
describe("RegisterClient limits per vouched address", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 }, registrationLimitPerMinute: 2 });
  });
  beforeEach(async () => {
    // Buckets live in the shared test database: start each test from empty ones.
    await stack.core.db.raw(`DELETE FROM rate_limit_logs WHERE key LIKE 'oauth-register:%'`);
  });
  after(() => stack.close());

  const buckets = async () =>
    Object.fromEntries(
      (
        (await stack.core.db.raw(`SELECT key, cardinality(hits) AS n FROM rate_limit_logs WHERE key LIKE 'oauth-register:%'`)).rows as {
          key: string;
          n: number;
        }[]
      ).map((r) => [r.key, Number(r.n)]),
    );
  const clients = async () => Number((await stack.core.db.raw(`SELECT count(*)::int AS n FROM oauth_clients`)).rows[0].n);

  it("direct callers share one bucket, whatever address they claim and with a wrong gateway credential", async () => {
    const claim = (address: string, extra: Record<string, string> = {}) => ({ headers: { [CLIENT_ADDRESS_HEADER]: address, ...extra } });
    await stack.clients.grants.registerClient(metadata, claim("203.0.113.1"));
    await stack.clients.grants.registerClient(metadata, claim("203.0.113.2"));
    const before = await clients();
    await expectRefused(stack.clients.grants.registerClient(metadata, claim("203.0.113.3")), Reason.RATE_LIMITED);
    await expectRefused(
      stack.clients.grants.registerClient(metadata, claim("203.0.113.4", { [GATEWAY_CREDENTIAL_HEADER]: "not-the-gateway-credential" })),
      Reason.RATE_LIMITED,
    );
    await expectRefused(stack.clients.grants.registerClient(metadata), Reason.RATE_LIMITED);
    expect(await clients()).to.equal(before);
    expect(await buckets()).to.deep.equal({ "oauth-register:": 2 });
    // The window passes: the bucket lets callers back in.
    stack.clock.advance(61_000);
    await stack.clients.grants.registerClient(metadata, claim("203.0.113.5"));
  });

  it("a gateway presenting the gateway credential gets a bucket per address it vouches for", async () => {
    const vouch = (address: string) => ({ headers: { [GATEWAY_CREDENTIAL_HEADER]: stack.gatewayToken, [CLIENT_ADDRESS_HEADER]: address } });
    await stack.clients.grants.registerClient(metadata, vouch("198.51.100.7"));
    await stack.clients.grants.registerClient(metadata, vouch("198.51.100.7"));
    await expectRefused(stack.clients.grants.registerClient(metadata, vouch("198.51.100.7")), Reason.RATE_LIMITED);
    await stack.clients.grants.registerClient(metadata, vouch("198.51.100.8"));
    // Direct callers' shared bucket is untouched by vouched calls.
    await stack.clients.grants.registerClient(metadata);
    expect(await buckets()).to.deep.equal({ "oauth-register:198.51.100.7": 2, "oauth-register:198.51.100.8": 1, "oauth-register:": 1 });
  });

  it("an IPv6 address is counted by its /64: vouched addresses moving within one share its bucket", async () => {
    const vouch = (address: string) => ({ headers: { [GATEWAY_CREDENTIAL_HEADER]: stack.gatewayToken, [CLIENT_ADDRESS_HEADER]: address } });
    await stack.clients.grants.registerClient(metadata, vouch("2001:db8:7:1::1"));
    await stack.clients.grants.registerClient(metadata, vouch("2001:db8:7:1::2"));
    await expectRefused(stack.clients.grants.registerClient(metadata, vouch("2001:db8:7:1:abcd::3")), Reason.RATE_LIMITED);
    await stack.clients.grants.registerClient(metadata, vouch("2001:db8:7:2::1"));
    expect(await buckets()).to.deep.equal({ "oauth-register:2001:db8:7:1::/64": 2, "oauth-register:2001:db8:7:2::/64": 1 });
  });

  it("POST /oauth2/register counts the socket address; forwarding and vouching headers from the client change nothing", async () => {
    const forged = (n: number) => ({
      "x-forwarded-for": `192.0.2.${n}`,
      "x-real-ip": `192.0.2.${n}`,
      [CLIENT_ADDRESS_HEADER]: `192.0.2.${n}`,
      [GATEWAY_CREDENTIAL_HEADER]: stack.gatewayToken,
    });
    const register = (n: number) =>
      fetch(`${stack.url}/oauth2/register`, {
        method: "POST",
        headers: { "content-type": "application/json", ...forged(n) },
        body: JSON.stringify({ client_name: "Forger", redirect_uris: ["http://127.0.0.1:9/callback"], scope: "accounts:read" }),
      });
    expect((await register(1)).status).to.equal(201);
    expect((await register(2)).status).to.equal(201);
    const refused = await register(3);
    expect(refused.status).to.equal(429);
    expect(refused.headers.get("retry-after")).to.equal("60");
    expect(((await refused.json()) as { error: string }).error).to.equal("rate_limited");
    expect(await buckets()).to.deep.equal({ "oauth-register:127.0.0.1": 2 });
    // Direct callers are a separate bucket from the gateway's 127.0.0.1.
    await stack.clients.grants.registerClient(metadata);
    // The helper every suite uses goes through the same gateway bucket.
    expect((await registerClient(stack)).status).to.equal(429);
  });
});
