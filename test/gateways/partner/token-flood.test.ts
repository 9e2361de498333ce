import { expect } from "chai";
import { PartnerStatus } from "../../../gen/vaultgate/partners/v1/partners_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { basic, createPartner } from "../../support/partners.js";
import { authorize, createJar, createUser, pkce, postForm, registerClient } from "../../support/agent-oauth.js";
import {
  OLD_SCRYPT,
  REDIRECT,
  post,
  postAgentToken,
  postAgentTokenFrom,
  randomAgentForm,
  randomClient,
  startFlood,
  type Answer,
} from "../../support/token-flood.js";

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
      for (const a of flood.answers.filter((x) => x.status === 401))
        expect(a.body).to.deep.equal({ error: "invalid_client", error_description: "client authentication failed" });

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
});
