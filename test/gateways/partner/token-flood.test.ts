import { request as httpRequest } from "node:http";
import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { basic, createPartner, postToken, type TestPartner } from "../../support/partners.js";
import { requirePostgres } from "../../support/db.js";

const CC = "grant_type=client_credentials";

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

/**
 * Wrong secrets for random client ids from `connections` loops until `stop()` (or `cap`
 * requests in all, so a broken server cannot make it spin forever). With `spread`, each
 * loop sends from its own loopback address (127.0.1.<n>): a flood from many addresses,
 * since one address's checks wait for each other.
 */
function startFlood(url: string, connections: number, cap = 5000, spread = false) {
  const answers: Answer[] = [];
  let stopped = false;
  let firstShed: () => void;
  const shed = new Promise<void>((resolve) => (firstShed = resolve));
  const loops = Array.from({ length: connections }, async (_, n) => {
    while (!stopped && answers.length < cap) {
      const a = spread ? await postTokenFrom(url, `127.0.1.${n + 1}`, randomClient()) : await post(url, randomClient());
      answers.push(a);
      if (a.status === 503) firstShed();
    }
  });
  const done = Promise.all(loops);
  return {
    answers,
    /** Resolves when the first flood request was shed (the queue is full), or rejects if the flood ended without one. */
    shed: Promise.race([shed, done.then(() => Promise.reject(new Error(`flood never filled the queue: ${answers.length} requests`)))]),
    async stop() {
      stopped = true;
      await done;
      return answers;
    },
  };
}

describe("partner token endpoint under a flood of bad credentials", function () {
  this.timeout(120_000);

  describe("the secret-check queue is saturated by wrong secrets", () => {
    let stack: TestStack;
    before(async () => {
      // A small queue so a modest flood fills it; the per-address budget out of the way so
      // the flood reaches scrypt (it has its own suite below).
      stack = await startStack({ gateway: true, secretChecks: { maxConcurrent: 2, maxQueue: 4, maxWaitMs: 1000 }, tokenFailuresPerAddressPerMinute: 1_000_000 });
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

  describe("failed attempts are limited per client address", () => {
    let stack: TestStack;
    let known: TestPartner;
    before(async () => {
      // Per address 3 failures a minute; per client 8 attempts a minute (spec 8's counter, lowered).
      stack = await startStack({ gateway: true, tokenFailuresPerAddressPerMinute: 3, tokenIssuanceLimitPerMinute: 8 });
      known = await createPartner(stack);
    });
    after(() => stack.close());

    it("refuses an address over its failure budget before the client's own counter and before scrypt; other addresses and remembered secrets still work", async () => {
      // Loopback source addresses of their own: the flood suite above spent 127.0.0.1's.
      const A = "127.0.0.11";
      const B = "127.0.0.12";
      const victim = await createPartner(stack);
      // `known` minted from A before the attack: its secret is remembered.
      expect((await postTokenFrom(stack.url, A, basic(known.clientId, known.clientSecret))).status).to.equal(200);

      // Three wrong secrets from A against the victim: plain 401s (that success gave its
      // reserved slot back, so all three get a check: only failures spend the budget).
      for (let i = 0; i < 3; i++) expect((await postTokenFrom(stack.url, A, basic(victim.clientId, "gps_wrong"))).status).to.equal(401);
      // Then A is refused, wrong secrets and unknown clients alike, with Retry-After.
      const refusals = [
        ...Array.from({ length: 10 }, () => basic(victim.clientId, "gps_wrong")),
        randomClient(),
        randomClient(),
      ];
      for (const authorization of refusals) {
        const a = await postTokenFrom(stack.url, A, authorization);
        expect(a.status).to.equal(429);
        expect(a.body.error).to.equal("rate_limited");
        expect(a.retryAfter).to.equal("60");
      }
      // From A, the victim's correct secret (never verified) waits too: its check would need scrypt.
      expect((await postTokenFrom(stack.url, A, basic(victim.clientId, victim.clientSecret))).status).to.equal(429);
      // From A, a remembered secret still mints: it needs no scrypt (proof the cache answered).
      expect((await postTokenFrom(stack.url, A, basic(known.clientId, known.clientSecret))).status).to.equal(200);
      // From B the victim mints: its counter holds only the 3 checked failures. Had A's
      // refusals reached it (3 + 11 > 8), this would be 429.
      const fromB = await postTokenFrom(stack.url, B, basic(victim.clientId, victim.clientSecret));
      expect(fromB.status).to.equal(200);
      expect(fromB.body.access_token).to.be.a("string");
    });

    it("unknown client and wrong secret answer alike", async () => {
      const C = "127.0.0.13";
      const unknown = await postTokenFrom(stack.url, C, randomClient());
      const wrong = await postTokenFrom(stack.url, C, basic(known.clientId, "gps_wrong"));
      expect(unknown).to.deep.equal(wrong);
      expect(wrong.status).to.equal(401);
    });

    it("a concurrent burst from one address gets exactly the budget of secret checks", async () => {
      // Concurrent reservations on one shared counter (real row locks on PostgreSQL).
      const D = "127.0.0.14";
      const burst = await Promise.all(Array.from({ length: 20 }, () => postTokenFrom(stack.url, D, randomClient())));
      const count = (s: number) => burst.filter((a) => a.status === s).length;
      expect(count(401)).to.equal(3);
      expect(count(429)).to.equal(17);
    });

    it("asks the shared counter one check at a time: the rest of a burst is refused from memory, one audit row per block", async () => {
      const E = "127.0.0.15";
      const ids = Array.from({ length: 30 }, () => `gpc_flood_${randomBytes(4).toString("hex")}`);
      const burst = await Promise.all(ids.map((id) => postTokenFrom(stack.url, E, basic(id, `gps_${randomBytes(32).toString("base64url")}`))));
      expect(burst.filter((a) => a.status === 401)).to.have.length(3);
      expect(burst.filter((a) => a.status === 429)).to.have.length(27);
      // Concurrent checks each asking the counter would each be refused and audited; in
      // turn, the first refusal blocks the address and the others never reach it.
      const refusals = await stack.core.db("audit_records").whereIn("actor", ids.map((id) => `partner:${id}`)).andWhere({ action: "partner.token.issue", reason: "rate_limited" });
      expect(refusals).to.have.length(1);
    });
  });
  describe("one address's waiting line is no longer than its failure budget (PostgreSQL)", () => {
    let stack: TestStack;
    before(async function () {
      requirePostgres(this, "the test holds the failure counter's row lock from a second connection");
      stack = await startStack({ gateway: true, tokenFailuresPerAddressPerMinute: 3 });
    });
    after(() => stack?.close());

    it("refuses a burst beyond one check in progress and three waiting at once, while the check in progress is held up", async () => {
      const F = "127.0.0.16";
      const ids = Array.from({ length: 30 }, () => `gpc_flood_${randomBytes(4).toString("hex")}`);
      // Hold the address's failure counter: its row, uncommitted, in a transaction of the
      // test's own, so the check in progress waits on its row lock until we let go.
      const trx = await stack.core.db.transaction();
      let holding = true;
      try {
        await trx.raw("INSERT INTO rate_limit_logs (key, hits, allowed, expires_at) VALUES (?, '{}', true, now() + interval '1 minute')", [`token-fail-addr:${F}`]);
        const answered: Answer[] = [];
        let early!: () => void;
        const earlyDone = new Promise<void>((resolve) => (early = resolve));
        const burst = ids.map((id) =>
          postTokenFrom(stack.url, F, basic(id, `gps_${randomBytes(32).toString("base64url")}`)).then((a) => {
            answered.push(a);
            if (holding && answered.length === 26) early();
            return a;
          }),
        );
        // With the counter held, one check is in progress and three wait their turn; the
        // other 26 are refused without waiting. A longer line would answer nobody here.
        let deadline: NodeJS.Timeout | undefined;
        await Promise.race([
          earlyDone,
          new Promise((_, reject) => (deadline = setTimeout(() => reject(new Error(`only ${answered.length} of the burst answered while one check was held up`)), 10_000))),
        ]).finally(() => clearTimeout(deadline));
        await new Promise((resolve) => setTimeout(resolve, 200));
        expect(answered).to.have.length(26);
        expect(answered.map((a) => [a.status, a.body.error, a.retryAfter])).to.deep.equal(Array.from({ length: 26 }, () => [429, "rate_limited", "60"]));
        holding = false;
        await trx.commit();
        // Let go: the four checks take their turns, three are wrong secrets (401) and the
        // counter refuses the fourth (429, the one audited refusal of the block).
        const all = await Promise.all(burst);
        expect(all.filter((a) => a.status === 401)).to.have.length(3);
        expect(all.filter((a) => a.status === 429)).to.have.length(27);
        const refusals = await stack.core.db("audit_records").whereIn("actor", ids.map((id) => `partner:${id}`)).andWhere({ action: "partner.token.issue", reason: "rate_limited" });
        expect(refusals).to.have.length(1);
      } finally {
        if (!trx.isCompleted()) await trx.rollback();
      }
    });
  });
});
