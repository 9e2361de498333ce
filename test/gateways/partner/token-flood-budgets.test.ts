import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { basic, createPartner } from "../../support/partners.js";
import { postForm, registerClient } from "../../support/agent-oauth.js";
import { postRpc } from "../../support/mcp.js";
import { createSecretHasher } from "../../../core/secrets/hasher.js";
import { OLD_SCRYPT, post, postAgentToken } from "../../support/token-flood.js";

describe("partner token endpoint under a flood of bad credentials", function () {
  this.timeout(120_000);

  describe("each client's own budget", () => {
    let stack: TestStack;
    before(async () => {
      // Room in the gate for a whole burst of one client, so every check that passes the
      // counter is decided (401) rather than shed.
      stack = await startStack({ gateway: true, publicUrls: true, secretChecks: { maxPerFlow: 100, maxQueue: 200, maxWaitMs: 60_000 } });
    });
    after(() => stack.close());

    it("partner: of 40 concurrent wrong secrets for one client id exactly 30 are checked; the rest and then its right secret get 429 with Retry-After: 60", async () => {
      const victim = await createPartner(stack);
      const burst = await Promise.all(
        Array.from({ length: 40 }, () => post(stack.url, basic(victim.clientId, `gps_${randomBytes(32).toString("base64url")}`))),
      );
      const count = (s: number) => burst.filter((a) => a.status === s).length;
      expect([count(401), count(429)]).to.deep.equal([30, 10]);
      for (const a of burst.filter((x) => x.status === 429)) expect([a.body.error, a.retryAfter]).to.deep.equal(["rate_limited", "60"]);
      // The budget is the client's own: its right secret waits for the window too...
      const own = await post(stack.url, basic(victim.clientId, victim.clientSecret));
      expect([own.status, own.retryAfter]).to.deep.equal([429, "60"]);
      // ...and nobody else's is touched, from the same address.
      const other = await createPartner(stack);
      expect((await post(stack.url, basic(other.clientId, other.clientSecret))).status).to.equal(200);
    });

    it("agent client: 30 failures a minute per client id at /oauth2/token, then 429 there, at /oauth2/revoke and -32004 at agent.grant.refresh", async () => {
      const victim = (await registerClient(stack)).body;
      const wrong = () => ({
        grant_type: "refresh_token",
        refresh_token: "vgr_nope",
        client_id: victim.client_id,
        client_secret: randomBytes(32).toString("base64url"),
      });
      const burst = await Promise.all(Array.from({ length: 40 }, () => postAgentToken(stack.url, wrong())));
      const count = (s: number) => burst.filter((a) => a.status === s).length;
      expect([count(401), count(429)]).to.deep.equal([30, 10]);
      for (const a of burst.filter((x) => x.status === 429)) expect([a.body.error, a.retryAfter]).to.deep.equal(["rate_limited", "60"]);
      for (const a of burst.filter((x) => x.status === 401)) expect(a.body.error).to.equal("invalid_client");

      const revoke = await postForm(`${stack.url}/oauth2/revoke`, { token: "vgr_nope", client_id: victim.client_id, client_secret: victim.client_secret });
      expect([revoke.status, revoke.body.error, revoke.headers.get("retry-after")]).to.deep.equal([429, "rate_limited", "60"]);
      const rpc = await postRpc(`${stack.url}/mcp/treasury`, {
        jsonrpc: "2.0",
        id: 1,
        method: "agent.grant.refresh",
        params: { refresh_token: "vgr_nope", client_id: victim.client_id, client_secret: victim.client_secret },
      });
      expect(rpc.json!.error.code).to.equal(-32004);
      expect(rpc.json!.error.data.retry_after_seconds).to.equal(60);

      // Another client from the same address is not affected; right secrets do not count.
      const other = (await registerClient(stack)).body;
      for (let i = 0; i < 3; i++) {
        const ok = await postForm(`${stack.url}/oauth2/revoke`, { token: "vgr_nope", client_id: other.client_id, client_secret: other.client_secret });
        expect(ok.status).to.equal(200);
      }
    });
  });

  describe("secrets hashed with the old scrypt parameters", () => {
    let stack: TestStack;
    before(async () => {
      stack = await startStack({ gateway: true, publicUrls: true });
    });
    after(() => stack.close());

    const nOf = (hash: string) => Number(hash.split("$")[1]);

    async function oldHash(secret: string): Promise<string> {
      const old = await createSecretHasher({ params: OLD_SCRYPT });
      try {
        return await old.hash(secret);
      } finally {
        await old.close();
      }
    }

    it("a partner's N=2^14 hash verifies, is stored again at N=2^10, and the secret keeps working in a fresh process", async () => {
      const partner = await createPartner(stack);
      await stack.core
        .db("partners")
        .where({ client_id: partner.clientId })
        .update({ secret_hash: await oldHash(partner.clientSecret) });
      const row = async () => String((await stack.core.db("partners").where({ client_id: partner.clientId }).first("secret_hash")).secret_hash);
      expect(nOf(await row())).to.equal(2 ** 14);

      expect((await post(stack.url, basic(partner.clientId, "gps_wrong"))).status).to.equal(401);
      expect(nOf(await row())).to.equal(2 ** 14);
      expect((await post(stack.url, basic(partner.clientId, partner.clientSecret))).status).to.equal(200);
      expect(nOf(await row())).to.equal(2 ** 10);
      expect((await post(stack.url, basic(partner.clientId, partner.clientSecret))).status).to.equal(200);

      const fresh = await startStack({ gateway: true });
      try {
        expect((await post(fresh.url, basic(partner.clientId, partner.clientSecret))).status).to.equal(200);
        expect((await post(fresh.url, basic(partner.clientId, "gps_wrong"))).status).to.equal(401);
      } finally {
        await fresh.close();
      }
    });

    it("concurrent first mints of a partner with an N=2^14 hash all get their token; one rehash is stored", async () => {
      const partner = await createPartner(stack);
      await stack.core
        .db("partners")
        .where({ client_id: partner.clientId })
        .update({ secret_hash: await oldHash(partner.clientSecret) });
      const burst = await Promise.all(Array.from({ length: 10 }, () => post(stack.url, basic(partner.clientId, partner.clientSecret))));
      expect(burst.map((a) => a.status)).to.deep.equal(Array.from({ length: 10 }, () => 200));
      const row = await stack.core.db("partners").where({ client_id: partner.clientId }).first("secret_hash");
      expect(nOf(String(row.secret_hash))).to.equal(2 ** 10);
      expect((await post(stack.url, basic(partner.clientId, partner.clientSecret))).status).to.equal(200);
    });

    it("an agent client's N=2^14 hash verifies, is stored again at N=2^10, and the secret keeps working in a fresh process", async () => {
      const client = (await registerClient(stack)).body;
      await stack.core
        .db("oauth_clients")
        .where({ client_id: client.client_id })
        .update({ secret_hash: await oldHash(client.client_secret) });
      const row = async () => String((await stack.core.db("oauth_clients").where({ client_id: client.client_id }).first("secret_hash")).secret_hash);
      const revoke = (url: string, secret: string) =>
        postForm(`${url}/oauth2/revoke`, { token: "vgr_nope", client_id: client.client_id, client_secret: secret });

      expect((await revoke(stack.url, "wrong")).status).to.equal(401);
      expect(nOf(await row())).to.equal(2 ** 14);
      expect((await revoke(stack.url, client.client_secret)).status).to.equal(200);
      expect(nOf(await row())).to.equal(2 ** 10);
      expect((await revoke(stack.url, client.client_secret)).status).to.equal(200);

      const fresh = await startStack({ gateway: true, publicUrls: true });
      try {
        expect((await revoke(fresh.url, client.client_secret)).status).to.equal(200);
        expect((await revoke(fresh.url, "wrong")).status).to.equal(401);
      } finally {
        await fresh.close();
      }
    });

    it("concurrent first checks of an agent client with an N=2^14 hash all pass; one rehash is stored", async () => {
      const client = (await registerClient(stack)).body;
      await stack.core
        .db("oauth_clients")
        .where({ client_id: client.client_id })
        .update({ secret_hash: await oldHash(client.client_secret) });
      const burst = await Promise.all(
        Array.from({ length: 10 }, () =>
          postForm(`${stack.url}/oauth2/revoke`, { token: "vgr_nope", client_id: client.client_id, client_secret: client.client_secret }),
        ),
      );
      expect(burst.map((a) => a.status)).to.deep.equal(Array.from({ length: 10 }, () => 200));
      const row = await stack.core.db("oauth_clients").where({ client_id: client.client_id }).first("secret_hash");
      expect(nOf(String(row.secret_hash))).to.equal(2 ** 10);
    });
  });
});
