import { expect } from "chai";
import { startStack, type TestStack } from "../support/stack.js";
import { createPartner, mintPartnerToken } from "../support/partners.js";
import { createUserFor } from "../support/resources.js";

/** Version 7: the first 48 bits are the Unix time in milliseconds (RFC 9562 5.7). */
const V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const millisOf = (id: string) => parseInt(id.slice(0, 8) + id.slice(9, 13), 16);

/**
 * Request ids as a partner sees them: server-made UUIDs (version 7, ordered by time), the
 * same in the X-Request-Id header and the audit record, never the client's own.
 */
describe("request ids (partner API, real stack)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack.close());

  it("are time-ordered UUIDs made by the server, and name the audit record of the read", async () => {
    const partner = await createPartner(stack, { entitlements: ["kyc:read"] });
    const user = await createUserFor(stack, partner, ["kyc:read"]);
    const token = await mintPartnerToken(stack, partner, "kyc:read");
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) {
      const before = Date.now();
      const res = await fetch(`${stack.url}/api/partner/users/${user.userId}/kyc`, {
        headers: { authorization: `Bearer ${token}`, "x-request-id": "00000000-0000-4000-8000-000000000000" },
      });
      expect(res.status).to.equal(200);
      await res.arrayBuffer();
      const id = res.headers.get("x-request-id")!;
      expect(id).to.match(V7);
      expect(millisOf(id)).to.be.within(before - 5, Date.now() + 5);
      const audited = await stack.core.db("audit_records").where({ request_id: id });
      expect(audited, "the read's audit record carries the id").to.have.length(1);
      ids.push(id);
      await new Promise((r) => setTimeout(r, 2)); // the next id is in a later millisecond
    }
    expect([...ids].sort()).to.deep.equal(ids);
    const forged = await stack.core.db("audit_records").where({ request_id: "00000000-0000-4000-8000-000000000000" });
    expect(forged, "a client's X-Request-Id is never used").to.have.length(0);
  });
});
