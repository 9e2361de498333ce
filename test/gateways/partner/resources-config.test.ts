import { expect } from "chai";
import { startStack } from "../../support/stack.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";
import { api, createUserFor } from "../../support/resources.js";
import { expectHttpError } from "../../support/refusals.js";
import { Outcome } from "../../../gen/vaultgate/audit/v1/audit_pb.js";

describe("partner resources: configuration-dependent failures", () => {
  it("missing or malformed verification key configuration -> 503 auth_unavailable", async () => {
    const good = await startStack({ gateway: true, webhookPollMs: 0 });
    const partner = await createPartner(good);
    const { userId } = await createUserFor(good, partner);
    const token = await mintPartnerToken(good, partner);
    await good.close();
    const broken = await startStack({ gateway: true, webhookPollMs: 0, signingKey: "{not json" });
    try {
      const res = await api(broken, "GET", `/users/${userId}/kyc`, { token });
      expectHttpError(res, 503, "auth_unavailable");
      expect(res.text).to.not.match(/SIGNING_KEY|json/i);
      expect(broken.logs.lines.join(""), "no key text in the log").to.not.include("{not json");
    } finally {
      await broken.close();
    }
  });

  it("a rejected sandbox URL -> 503 provider_unavailable, and the provider's error is in core's log", async () => {
    const stack = await startStack({ gateway: true, webhookPollMs: 0, kycSandboxUrl: "ftp://sandbox.example" });
    try {
      const partner = await createPartner(stack);
      const { userId } = await createUserFor(stack, partner);
      const before = stack.logs.lines.length;
      const res = await api(stack, "POST", `/users/${userId}/kyc/link`, { token: await mintPartnerToken(stack, partner) });
      expectHttpError(res, 503, "provider_unavailable");
      expect(res.text).to.not.include("ftp");
      const line = stack.logs.lines.slice(before).find((l) => l.includes("rpc failed on our side"));
      expect(line, "core's line for the failure").to.include("PROVIDER_UNAVAILABLE").and.include("sandbox base URL rejected");
    } finally {
      await stack.close();
    }
  });

  it("per-partner, per-operation rate limits are shared across replicas -> 429 rate_limited, Retry-After: 60", async () => {
    const a = await startStack({ gateway: true, webhookPollMs: 0, resourceRateLimits: { "kyc.read": 3 } });
    const b = await startStack({ gateway: true, webhookPollMs: 0, resourceRateLimits: { "kyc.read": 3 } });
    try {
      b.clock.set(a.clock());
      const partner = await createPartner(a);
      const { userId } = await createUserFor(a, partner);
      const token = await mintPartnerToken(a, partner);
      expect((await api(a, "GET", `/users/${userId}/kyc`, { token })).status).to.equal(200);
      expect((await api(b, "GET", `/users/${userId}/kyc`, { token })).status).to.equal(200);
      expect((await api(a, "GET", `/users/${userId}/kyc`, { token })).status).to.equal(200);
      expectHttpError(await api(b, "GET", `/users/${userId}/kyc`, { token }), 429, "rate_limited");
      // Other operations have their own budget.
      expect((await api(a, "GET", `/users/${userId}/wallets`, { token })).status).to.equal(200);
      a.clock.advance(60_000);
      expect((await api(a, "GET", `/users/${userId}/kyc`, { token })).status).to.equal(200);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it("concurrent requests on two replicas are counted exactly, and each keeps its own answer and audit row", async () => {
    const limits = { "kyc.read": 40 };
    const a = await startStack({ gateway: true, webhookPollMs: 0, resourceRateLimits: limits });
    const b = await startStack({ gateway: true, webhookPollMs: 0, resourceRateLimits: limits });
    try {
      b.clock.set(a.clock());
      const busy = await createPartner(a);
      const other = await createPartner(a);
      const { userId } = await createUserFor(a, busy);
      const { userId: otherUser } = await createUserFor(a, other);
      const busyToken = await mintPartnerToken(a, busy);
      const otherToken = await mintPartnerToken(a, other);
      // One burst: 60 reads of the busy partner (limit 40) interleaved with the other
      // partner's reads of its own user (200) and of the busy partner's user (404).
      const burst = await Promise.all(
        Array.from({ length: 90 }, (_, i) => {
          const stack = i % 2 === 0 ? a : b;
          if (i % 3 !== 2) return api(stack, "GET", `/users/${userId}/kyc`, { token: busyToken }).then((res) => ({ kind: "busy", res }));
          const target = i % 6 === 2 ? otherUser : userId;
          return api(stack, "GET", `/users/${target}/kyc`, { token: otherToken }).then((res) => ({ kind: target === otherUser ? "own" : "foreign", res }));
        }),
      );
      const statuses = (kind: string) => burst.filter((r) => r.kind === kind).map((r) => r.res.status);
      expect(statuses("busy").filter((s) => s === 200)).to.have.length(40);
      expect(statuses("busy").filter((s) => s === 429)).to.have.length(20);
      expect(new Set(statuses("own"))).to.deep.equal(new Set([200]));
      expect(new Set(statuses("foreign"))).to.deep.equal(new Set([404]));
      const audits = await Promise.all(burst.map(({ res }) => a.admin.audit.listRecords({ requestId: res.headers.get("x-request-id")!, limit: 10 })));
      for (const [i, { kind, res }] of burst.entries()) {
        const rows = audits[i]!;
        const actor = `partner:${(kind === "busy" ? busy : other).clientId}`;
        const expected = res.status === 200 ? [Outcome.SUCCESS, ""] : [Outcome.FAILURE, res.status === 429 ? "rate_limited" : "user_not_found"];
        expect(rows.records.map((r) => [r.actor, r.action, r.outcome, r.reason])).to.deep.equal([[actor, "partner.kyc.read", ...expected]]);
        if (res.status === 200) expect((res.body as { user_id: string }).user_id).to.equal(kind === "busy" ? userId : otherUser);
      }
    } finally {
      await a.close();
      await b.close();
    }
  });
});
