import { request as httpRequest } from "node:http";
import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { basic, createPartner, postToken } from "../../support/partners.js";
import { authorize, createJar, createUser, pkce, postForm, registerClient } from "../../support/agent-oauth.js";
import { postRpc } from "../../support/mcp.js";
import { createSecretHasher } from "../../../core/secrets/hasher.js";

const CC = "grant_type=client_credentials";
const REDIRECT = "http://127.0.0.1:9/callback";
/** The parameters client secrets were hashed with before: about 50 ms a derivation here. */
const OLD_SCRYPT = { N: 2 ** 14, r: 8, p: 1 };

interface Answer {
  status: number;
  retryAfter: string | null;
  body: { error?: string; access_token?: string };
}

/** POSTs to the token endpoint from a chosen loopback source address (a distinct client address for the gateway). */
function postTokenFrom(url: string, localAddress: string, authorization: string): Promise<Answer> {
  const target = new URL(`${url}/api/partner/oauth/token`);
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: "POST",
        localAddress,
        agent: false,
        headers: { "content-type": "application/x-www-form-urlencoded", authorization, "content-length": Buffer.byteLength(CC) },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => resolve({ status: res.statusCode!, retryAfter: (res.headers["retry-after"] as string | undefined) ?? null, body: JSON.parse(text) }));
      },
    );
    req.on("error", reject);
    req.end(CC);
  });
}

async function post(url: string, authorization: string): Promise<Answer> {
  const res = await postToken(url, CC, { authorization });
  return { status: res.status, retryAfter: res.headers.get("retry-after"), body: (await res.json()) as Answer["body"] };
}

const randomClient = () => basic(`gpc_flood_${randomBytes(4).toString("hex")}`, `gps_${randomBytes(32).toString("base64url")}`);

/** A refresh at the agent token endpoint for a made-up client id. */
const randomAgentForm = () => ({ grant_type: "refresh_token", refresh_token: "vgr_nope", client_id: randomBytes(16).toString("hex"), client_secret: randomBytes(32).toString("base64url") });

async function postAgentToken(url: string, form: Record<string, string>): Promise<Answer> {
  const res = await postForm(`${url}/oauth2/token`, form);
  return { status: res.status, retryAfter: res.headers.get("retry-after"), body: res.body as Answer["body"] };
}

/**
 * Wrong secrets for random client ids from `connections` loops until `stop()` (or `cap`
 * requests in all, so a broken server cannot make it spin forever). With `spread`, each
 * loop sends from its own loopback address (127.0.1.<n>): a flood from many addresses,
 * since one address's checks wait for each other.
 */
function startFlood(url: string, connections: number, cap = 5000, spread = false, send?: () => Promise<Answer>) {
  const answers: Answer[] = [];
  let stopped = false;
  let firstShed: () => void;
  const shed = new Promise<void>((resolve) => (firstShed = resolve));
  const waiting: { n: number; resolve: () => void }[] = [];
  let failed = 0;
  const loops = Array.from({ length: connections }, async (_, n) => {
    while (!stopped && answers.length < cap) {
      const a = send ? await send() : spread ? await postTokenFrom(url, `127.0.1.${n + 1}`, randomClient()) : await post(url, randomClient());
      answers.push(a);
      if (a.status === 503) firstShed();
      if (a.status === 401) failed++;
      for (const w of waiting.filter((x) => failed >= x.n)) w.resolve();
    }
  });
  const done = Promise.all(loops);
  return {
    answers,
    /** Resolves once `n` flood requests were answered 401 (checked and refused), or rejects if the flood ended first. */
    failures: (n: number) =>
      Promise.race([
        new Promise<void>((resolve) => waiting.push({ n, resolve })),
        done.then(() => Promise.reject(new Error(`flood ended after ${failed} failures`))),
      ]),
    /** Resolves when the first flood request was shed (the queue is full), or rejects if the flood ended without one. */
    shed: Promise.race([shed, done.then(() => Promise.reject(new Error(`flood never filled the queue: ${answers.length} requests`)))]),
    async stop() {
      stopped = true;
      await done;
      return answers;
    },
  };
}

/** A refresh for a made-up agent client id at /oauth2/token, sent from a chosen loopback source address. */
function postAgentTokenFrom(url: string, localAddress: string): Promise<Answer> {
  const target = new URL(`${url}/oauth2/token`);
  const body = new URLSearchParams(randomAgentForm()).toString();
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: target.hostname, port: target.port, path: target.pathname, method: "POST", localAddress, agent: false, headers: { "content-type": "application/x-www-form-urlencoded" } },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => resolve({ status: res.statusCode!, retryAfter: (res.headers["retry-after"] as string | undefined) ?? null, body: JSON.parse(text) }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

describe("partner token endpoint under a flood of bad credentials", function () {
  this.timeout(120_000);

  describe("the secret-check queue is saturated by wrong secrets", () => {
    let stack: TestStack;
    before(async () => {
      // A small queue and the old, dearer scrypt parameters, so a modest flood fills it.
      stack = await startStack({ gateway: true, scrypt: OLD_SCRYPT, secretChecks: { maxConcurrent: 2, maxQueue: 4, maxWaitMs: 1000 } });
    });
    after(() => stack.close());

    it("keeps minting for a client that minted before, sheds the flood with 503 + Retry-After, and logs each refusal as one info line", async () => {
      const partner = await createPartner(stack);
      expect((await post(stack.url, basic(partner.clientId, partner.clientSecret))).status).to.equal(200);
      const linesBefore = stack.logs.lines.length;

      const flood = startFlood(stack.url, 32, 5000, true);
      const legit: Answer[] = [];
      try {
        await flood.shed;
        // The queue is full of failures right now and the flood keeps it so.
        for (let i = 0; i < 5; i++) legit.push(await post(stack.url, basic(partner.clientId, partner.clientSecret)));
      } finally {
        await flood.stop();
      }

      expect(legit.map((a) => a.status)).to.deep.equal([200, 200, 200, 200, 200]);
      expect(legit.every((a) => typeof a.body.access_token === "string")).to.equal(true);

      const statuses = new Set(flood.answers.map((a) => a.status));
      expect([...statuses].sort()).to.deep.equal([401, 503].filter((s) => statuses.has(s)));
      expect(statuses.has(503)).to.equal(true);
      for (const a of flood.answers.filter((x) => x.status === 503)) {
        expect(a.body.error).to.equal("temporarily_unavailable");
        expect(Number(a.retryAfter)).to.be.within(1, 30);
      }
      for (const a of flood.answers.filter((x) => x.status === 401)) expect(a.body).to.deep.equal({ error: "invalid_client", error_description: "client authentication failed" });

      // (e) every refusal is one short info line (the request's, naming core's reason),
      // never an error or a stack.
      // A request's line is written just after its answer went out.
      const requestLines = () => stack.logs.lines.slice(linesBefore).filter((l) => l.includes('"msg":"request"')).length;
      for (let i = 0; i < 200 && requestLines() < flood.answers.length + legit.length; i++) await new Promise((r) => setTimeout(r, 10));
      const lines = stack.logs.lines.slice(linesBefore).map((l) => JSON.parse(l) as { level: number; msg: string; status?: number; reason?: string });
      expect(lines.filter((l) => l.msg !== "request")).to.deep.equal([]);
      const refused = lines.filter((l) => l.status === 401 || l.status === 503);
      expect(refused.length).to.equal(flood.answers.length);
      for (const l of refused) expect(l).to.include({ level: 30, reason: l.status === 401 ? "INVALID_CLIENT" : "OVERLOADED" });
      expect(stack.logs.lines.slice(linesBefore).join("")).to.not.match(/stack|"err"/);
    });

    it("a rotated secret no longer mints, even though it was remembered", async () => {
      const partner = await createPartner(stack);
      expect((await post(stack.url, basic(partner.clientId, partner.clientSecret))).status).to.equal(200);
      expect((await post(stack.url, basic(partner.clientId, partner.clientSecret))).status).to.equal(200);
      const rotated = await stack.admin.partners.rotateSecret({ clientId: partner.clientId });

      const old = await post(stack.url, basic(partner.clientId, partner.clientSecret));
      expect(old.status).to.equal(401);
      expect(old.body).to.deep.equal({ error: "invalid_client", error_description: "client authentication failed" });
      // And it stays refused (the entry was dropped, and scrypt says no).
      expect((await post(stack.url, basic(partner.clientId, partner.clientSecret))).status).to.equal(401);
      expect((await post(stack.url, basic(partner.clientId, rotated.clientSecret))).status).to.equal(200);
    });

    it("a suspended client is refused even with a remembered secret", async () => {
      const partner = await createPartner(stack);
      expect((await post(stack.url, basic(partner.clientId, partner.clientSecret))).status).to.equal(200);
      await stack.admin.partners.setPartnerStatus({ clientId: partner.clientId, status: PartnerStatus.SUSPENDED });
      const res = await post(stack.url, basic(partner.clientId, partner.clientSecret));
      expect(res.status).to.equal(403);
      expect(res.body.error).to.equal("invalid_client");
    });
  });

  describe("honest clients during a flood from their own address", () => {
    let stack: TestStack;
    before(async () => {
      // The shipped queue bounds, but no shedding on waiting time: derivations run only on
      // CPU nobody else wants, and on a busy test machine that makes the wait, not the
      // order, decide.
      stack = await startStack({ gateway: true, publicUrls: true, secretChecks: { maxWaitMs: 600_000 } });
    });
    after(() => stack.close());

    it("a partner whose secret was never verified mints at once from the flooder's address; the flood gets 401 or 503, never 429", async () => {
      const partners = [await createPartner(stack), await createPartner(stack), await createPartner(stack)];
      const flood = startFlood(stack.url, 48, 5000, false, () => post(stack.url, randomClient()));
      const legit: Answer[] = [];
      try {
        // More failures from this address than any per-address budget used to allow.
        await flood.failures(30);
        // From the same address (127.0.0.1), each partner's first mint pays a derivation.
        for (const p of partners) legit.push(await post(stack.url, basic(p.clientId, p.clientSecret)));
      } finally {
        await flood.stop();
      }
      expect(legit.map((a) => a.status)).to.deep.equal([200, 200, 200]);
      expect(legit.every((a) => typeof a.body.access_token === "string")).to.equal(true);
      const statuses = new Set(flood.answers.map((a) => a.status));
      expect([...statuses].filter((s) => s !== 401 && s !== 503)).to.deep.equal([]);
    });

    it("an agent client whose secret was never verified exchanges its code during an agent-side flood from its address; partners still mint", async () => {
      const user = await createUser(stack);
      const client = (await registerClient(stack)).body;
      const jar = createJar(stack.url);
      const { verifier, challenge } = pkce();
      const back = await authorize(stack, jar, user.email, {
        response_type: "code",
        client_id: client.client_id,
        redirect_uri: REDIRECT,
        code_challenge: challenge,
        code_challenge_method: "S256",
        scope: "accounts:read",
        resource: [`urn:vaultgate:vault:${user.vaultId}`],
        state: "st-1",
      });
      const partner = await createPartner(stack);
      const flood = startFlood(stack.url, 48, 5000, false, () => postAgentToken(stack.url, randomAgentForm()));
      let exchanged: Awaited<ReturnType<typeof postForm>>;
      let minted: Answer;
      try {
        await flood.failures(30);
        exchanged = await postForm(`${stack.url}/oauth2/token`, {
          grant_type: "authorization_code",
          code: back.searchParams.get("code")!,
          redirect_uri: REDIRECT,
          code_verifier: verifier,
          client_id: client.client_id,
          client_secret: client.client_secret,
        });
        minted = await post(stack.url, basic(partner.clientId, partner.clientSecret));
      } finally {
        await flood.stop();
      }
      expect(exchanged.status, JSON.stringify(exchanged.body)).to.equal(200);
      expect(exchanged.body.access_token).to.be.a("string");
      expect(minted.status).to.equal(200);
      const statuses = new Set(flood.answers.map((a) => a.status));
      expect([...statuses].filter((s) => s !== 401 && s !== 503)).to.deep.equal([]);
    });

    it("unknown agent client ids from another address get their own turns during an agent-side flood: checked (401), not shed", async () => {
      const flood = startFlood(stack.url, 48, 5000, false, () => postAgentToken(stack.url, randomAgentForm()));
      const other: Answer[] = [];
      try {
        await flood.failures(30);
        for (let i = 0; i < 5; i++) other.push(await postAgentTokenFrom(stack.url, "127.0.2.1"));
      } finally {
        await flood.stop();
      }
      expect(other.map((a) => a.status)).to.deep.equal([401, 401, 401, 401, 401]);
    });
  });

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
      const burst = await Promise.all(Array.from({ length: 40 }, () => post(stack.url, basic(victim.clientId, `gps_${randomBytes(32).toString("base64url")}`))));
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
      const wrong = () => ({ grant_type: "refresh_token", refresh_token: "vgr_nope", client_id: victim.client_id, client_secret: randomBytes(32).toString("base64url") });
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
      await stack.core.db("partners").where({ client_id: partner.clientId }).update({ secret_hash: await oldHash(partner.clientSecret) });
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
      await stack.core.db("partners").where({ client_id: partner.clientId }).update({ secret_hash: await oldHash(partner.clientSecret) });
      const burst = await Promise.all(Array.from({ length: 10 }, () => post(stack.url, basic(partner.clientId, partner.clientSecret))));
      expect(burst.map((a) => a.status)).to.deep.equal(Array.from({ length: 10 }, () => 200));
      const row = await stack.core.db("partners").where({ client_id: partner.clientId }).first("secret_hash");
      expect(nOf(String(row.secret_hash))).to.equal(2 ** 10);
      expect((await post(stack.url, basic(partner.clientId, partner.clientSecret))).status).to.equal(200);
    });

    it("an agent client's N=2^14 hash verifies, is stored again at N=2^10, and the secret keeps working in a fresh process", async () => {
      const client = (await registerClient(stack)).body;
      await stack.core.db("oauth_clients").where({ client_id: client.client_id }).update({ secret_hash: await oldHash(client.client_secret) });
      const row = async () => String((await stack.core.db("oauth_clients").where({ client_id: client.client_id }).first("secret_hash")).secret_hash);
      const revoke = (url: string, secret: string) => postForm(`${url}/oauth2/revoke`, { token: "vgr_nope", client_id: client.client_id, client_secret: secret });

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
      await stack.core.db("oauth_clients").where({ client_id: client.client_id }).update({ secret_hash: await oldHash(client.client_secret) });
      const burst = await Promise.all(
        Array.from({ length: 10 }, () => postForm(`${stack.url}/oauth2/revoke`, { token: "vgr_nope", client_id: client.client_id, client_secret: client.client_secret })),
      );
      expect(burst.map((a) => a.status)).to.deep.equal(Array.from({ length: 10 }, () => 200));
      const row = await stack.core.db("oauth_clients").where({ client_id: client.client_id }).first("secret_hash");
      expect(nOf(String(row.secret_hash))).to.equal(2 ** 10);
    });
  });
});
