import http from "node:http";
import type { Socket } from "node:net";
import { expect } from "chai";
import { createPartner, mintPartnerToken } from "../support/partners.js";
import { createUserFor } from "../support/resources.js";
import { startStack, type TestStack } from "../support/stack.js";

/** Requests in turn on one kept-alive connection: well past Node's default of 10 listeners per signal. */
const IN_TURN = 40;

/**
 * The gateway gives every core call of a connection the same signal, aborted when the client
 * closes it: each call must stop listening when it ends, or a long-lived connection leaks.
 */
describe("many requests on one kept-alive connection (the gateway's signal for a client that leaves)", function () {
  this.timeout(60_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack?.close());

  it(`${IN_TURN} partner reads in turn are answered on one connection, and no listener leaks`, async () => {
    const partner = await createPartner(stack);
    const { userId } = await createUserFor(stack, partner, ["kyc:read"]);
    const token = await mintPartnerToken(stack, partner);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const warnings: Error[] = [];
    const onWarning = (w: Error) => warnings.push(w);
    process.on("warning", onWarning);
    const sockets = new Set<Socket>();
    const statuses: number[] = [];
    try {
      for (let i = 0; i < IN_TURN; i++) {
        const status = await new Promise<number>((resolve, reject) => {
          const req = http.get(`${stack.url}/api/partner/users/${userId}/kyc`, { agent, headers: { authorization: `Bearer ${token}` } }, (res) => {
            sockets.add(res.socket);
            res.resume();
            res.on("end", () => resolve(res.statusCode!));
          });
          req.on("error", reject);
        });
        statuses.push(status);
      }
      // A warning is emitted on the next tick after the listener that crossed the limit.
      await new Promise((r) => setImmediate(r));
    } finally {
      process.off("warning", onWarning);
      agent.destroy();
    }
    expect(sockets.size, "one connection").to.equal(1);
    expect(new Set(statuses)).to.deep.equal(new Set([200]));
    expect(warnings.map((w) => `${w.name}: ${w.message}`)).to.deep.equal([]);
  });
});
