import { request as httpRequest } from "node:http";
import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { basic, createPartner } from "../../support/partners.js";

const CC = "grant_type=client_credentials";
const ACTION = "partner.token.issue";

/** POSTs client credentials to the token endpoint from a chosen loopback source address. */
function postFrom(url: string, localAddress: string, authorization: string): Promise<{ status: number; error?: string; retryAfter?: string }> {
  const target = new URL(`${url}/api/partner/oauth/token`);
  return new Promise((resolve, reject) => {
    const headers = { "content-type": "application/x-www-form-urlencoded", authorization, "content-length": Buffer.byteLength(CC) };
    const req = httpRequest({ host: target.hostname, port: target.port, path: target.pathname, method: "POST", localAddress, agent: false, headers }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (text += c));
      res.on("end", () =>
        resolve({
          status: res.statusCode!,
          error: (JSON.parse(text) as { error?: string }).error,
          retryAfter: res.headers["retry-after"] as string | undefined,
        }),
      );
    });
    req.on("error", reject);
    req.end(CC);
  });
}

const unknownId = () => `gpc_nobody_${randomBytes(4).toString("hex")}`;
const wrongSecret = () => `gps_${randomBytes(32).toString("base64url")}`;

/**
 * A client id nobody registered is no client's attempt: its failures write no attempt
 * counter row and are audited once a minute per client address, carrying how many went
 * unrecorded; a registered client's failures are still audited one by one.
 */
describe("partner token endpoint: client ids nobody registered", function () {
  this.timeout(120_000);
  let stack: TestStack;
  before(async () => {
    // Room in the gate for a whole burst from one address, so every check is decided (401), not shed.
    stack = await startStack({ gateway: true, secretChecks: { maxPerFlow: 100, maxQueue: 200, maxWaitMs: 60_000 } });
  });
  after(() => stack.close());

  const failures = (address: string) =>
    stack.core.db("audit_records").where({ action: ACTION, outcome: "failure", client_address: address }).orderBy("seq").select("actor", "reason", "subject");
  const counterRows = async (prefix: string) => Number((await stack.core.db("rate_limit_logs").where("key", "like", `%${prefix}%`).count({ n: "*" }))[0]!.n);

  it("a flood of unknown ids from one address (40 at once) is refused 401, audited once that minute with no counter row, and counted into the next record", async () => {
    const address = "127.0.3.1";
    const burst = await Promise.all(Array.from({ length: 40 }, () => postFrom(stack.url, address, basic(unknownId(), wrongSecret()))));
    expect(burst.map((a) => [a.status, a.error])).to.deep.equal(burst.map(() => [401, "invalid_client"]));
    expect((await failures(address)).map((r) => [r.reason, r.subject])).to.deep.equal([["invalid_client", ""]]);
    expect(await counterRows("gpc_nobody_")).to.equal(0);

    // Another address is audited on its own.
    expect((await postFrom(stack.url, "127.0.3.2", basic(unknownId(), wrongSecret()))).status).to.equal(401);
    expect(await failures("127.0.3.2")).to.have.length(1);

    // A minute later the address's next failure is audited with the 39 that were not.
    stack.clock.advance(60_001);
    expect((await postFrom(stack.url, address, basic(unknownId(), wrongSecret()))).status).to.equal(401);
    expect((await failures(address)).map((r) => [r.reason, r.subject])).to.deep.equal([
      ["invalid_client", ""],
      ["invalid_client", "unrecorded_before:39"],
    ]);
  });

  it("a registered client's wrong secrets from the same address are each audited and counted", async () => {
    const address = "127.0.3.3";
    const partner = await createPartner(stack);
    expect((await postFrom(stack.url, address, basic(unknownId(), wrongSecret()))).status).to.equal(401);
    const wrong = await Promise.all(Array.from({ length: 5 }, () => postFrom(stack.url, address, basic(partner.clientId, wrongSecret()))));
    expect(wrong.map((a) => a.status)).to.deep.equal([401, 401, 401, 401, 401]);
    const rows = await failures(address);
    expect(rows.filter((r) => r.actor === `partner:${partner.clientId}`)).to.have.length(5);
    expect(await counterRows(partner.clientId)).to.equal(1);
  });

  it("one unknown id is refused 429 after 30 attempts a minute, as a registered one is, without a counter row", async () => {
    const id = unknownId();
    const burst = await Promise.all(Array.from({ length: 40 }, () => postFrom(stack.url, "127.0.3.4", basic(id, wrongSecret()))));
    const count = (s: number) => burst.filter((a) => a.status === s).length;
    expect([count(401), count(429)]).to.deep.equal([30, 10]);
    for (const a of burst.filter((x) => x.status === 429)) expect([a.error, a.retryAfter]).to.deep.equal(["rate_limited", "60"]);
    expect(await counterRows(id)).to.equal(0);
    // The window slides: a minute later the id is checked again.
    stack.clock.advance(60_001);
    expect((await postFrom(stack.url, "127.0.3.4", basic(id, wrongSecret()))).status).to.equal(401);
  });
});
