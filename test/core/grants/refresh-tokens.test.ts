import { createHash, createHmac, randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { expect } from "chai";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startCoreServer, type CoreServer } from "../../../core/server.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { expectGrpcRefused, expectRefused, grpcRefusalOf } from "../../support/refusals.js";

const protoDir = fileURLToPath(new URL("../../../proto", import.meta.url));

type Unary = (req: object, md: grpc.Metadata, cb: (err: grpc.ServiceError | null, res: Record<string, unknown>) => void) => void;
type Token = { access_token: string; refresh_token: string; jti: string; expires_in?: string };

const sha = (s: string) => createHash("sha256").update(s).digest("hex");
const hmac = (key: string | Buffer, msg: string | Buffer) => createHmac("sha256", key).update(msg).digest("base64url");

/**
 * Refresh tokens (docs/reference/agent-oauth.md, "Refresh"): nothing stored lets anyone
 * recompute one; operator grants refresh only with the operator credential. Core is
 * called by a stock grpc-js client on a real port, as an operator's tool would.
 */
describe("grants core: refresh tokens", () => {
  let stack: TestStack;
  let server: CoreServer;
  let grants: grpc.Client & Record<string, Unary>;
  before(async () => {
    stack = await startStack({ mcpUrl: "http://mcp.test", scrypt: { N: 1024, r: 8, p: 1 } });
    server = await startCoreServer(stack.core, 0);
    const definition = protoLoader.loadSync(["vaultgate/grants/v1/grants.proto"], {
      includeDirs: [protoDir],
      keepCase: true,
      longs: String,
      enums: String,
      defaults: true,
    });
    const loaded = grpc.loadPackageDefinition(definition) as unknown as { vaultgate: { grants: { v1: { GrantsService: grpc.ServiceClientConstructor } } } };
    grants = new loaded.vaultgate.grants.v1.GrantsService(server.url.replace("http://", ""), grpc.credentials.createInsecure()) as never;
  });
  after(async () => {
    grants?.close();
    await server?.close();
    await stack?.close();
  });

  const operator = (token = stack.adminToken) => {
    const md = new grpc.Metadata();
    md.set("authorization", `Bearer ${token}`);
    return md;
  };
  const call = (method: string, req: object, md = new grpc.Metadata()) =>
    new Promise<Record<string, unknown>>((resolve, reject) => grants[method]!(req, md, (err, res) => (err ? reject(err) : resolve(res))));
  const refresh = async (refreshToken: string, md?: grpc.Metadata, client = { client_id: "", client_secret: "" }) =>
    (await call("RefreshGrant", { refresh_token: refreshToken, ...client }, md)).token as Token;

  async function user() {
    return stack.admin.partners.createUser({ email: `u-${randomBytes(4).toString("hex")}@example.com` });
  }
  async function operatorGrant() {
    const u = await user();
    const { token } = await stack.admin.grants.issueGrant({ userId: u.userId, vaultId: u.vaultId, scopes: ["accounts:read"] });
    return { u, token: { access_token: token!.accessToken, refresh_token: token!.refreshToken, jti: token!.jti } };
  }
  async function clientGrant() {
    const u = await user();
    const { client, clientSecret } = await stack.clients.grants.registerClient({
      clientName: "Dump test",
      redirectUris: ["http://127.0.0.1:9/cb"],
      scope: "accounts:read",
    });
    const { token } = await stack.admin.grants.issueGrant({ userId: u.userId, vaultId: u.vaultId, scopes: ["accounts:read"], clientId: client!.clientId });
    const creds = { client_id: client!.clientId, client_secret: clientSecret };
    return { u, creds, token: { access_token: token!.accessToken, refresh_token: token!.refreshToken, jti: token!.jti } };
  }

  describe("a database dump", () => {
    it("holds no refresh-token key and no value that recomputes a live refresh token; the stored salt alone does not either", async () => {
      const { u, creds, token: t0 } = await clientGrant();
      const t1 = await refresh(t0.refresh_token, undefined, creds);
      const t2 = await refresh(t1.refresh_token, undefined, creds);
      const op = await operatorGrant();
      const o1 = await refresh(op.token.refresh_token, operator());

      // The dump: every column of instance_secrets and of the grants involved.
      const secrets = (await stack.core.db.raw(`SELECT * FROM instance_secrets`)).rows as Record<string, unknown>[];
      expect(secrets.map((r) => r.name)).to.not.include("refresh-token");
      const rows = (await stack.core.db.raw(`SELECT * FROM grants WHERE user_id IN (?, ?)`, [u.userId, op.u.userId])).rows as Record<string, unknown>[];
      expect(rows).to.have.length(5);
      const stored: (string | Buffer)[] = [];
      for (const r of [...secrets, ...rows]) {
        for (const v of Object.values(r)) {
          if (v === null || v === undefined) continue;
          if (v instanceof Uint8Array) stored.push(Buffer.from(v), Buffer.from(v).toString("hex"), Buffer.from(v).toString("base64url"));
          else if (v instanceof Date) stored.push(v.toISOString());
          else stored.push(Array.isArray(v) ? v.join(" ") : String(v));
        }
      }
      const dumpText = JSON.stringify([secrets.map((r) => ({ ...r, value: Buffer.from(r.value as Uint8Array).toString("hex") })), rows]);

      for (const live of [t2, o1]) {
        const row = rows.find((r) => r.id === live.jti)!;
        expect(row.state).to.equal("active");
        // Stored as its SHA-256 only, never in the clear.
        expect(row.refresh_hash).to.equal(sha(live.refresh_token));
        expect(dumpText).to.not.include(live.refresh_token.slice(4));
        const body = live.refresh_token.slice("vgr_".length);
        // The old scheme, HMAC(key, grant id), under any stored value; and any stored value
        // (the salt among them) as key or message with any other, the salt alone included.
        expect(typeof row.refresh_salt).to.equal("string");
        for (const key of stored) {
          for (const msg of [live.jti, String(row.refresh_salt), String(row.lineage_id), String(row.parent_grant_id)]) {
            expect(hmac(key, msg)).to.not.equal(body);
            expect(hmac(msg, key)).to.not.equal(body);
          }
          expect(createHash("sha256").update(key).digest("base64url")).to.not.equal(body);
        }
      }

      // What the successor's token needs: the token presented (never stored) and the salt.
      const row2 = rows.find((r) => r.id === t2.jti)!;
      expect(`vgr_${hmac(t1.refresh_token, String(row2.refresh_salt))}`).to.equal(t2.refresh_token);
      expect(`vgr_${hmac(`vgr_${randomBytes(32).toString("base64url")}`, String(row2.refresh_salt))}`).to.not.equal(t2.refresh_token);
      // A lineage's first token is random: no salt, and two grants' tokens share nothing.
      const first = rows.find((r) => r.id === t0.jti)!;
      expect(first.refresh_salt).to.equal(null);
      expect(t0.refresh_token).to.match(/^vgr_[A-Za-z0-9_-]{43}$/);
    });
  });

  describe("operator grants (no client)", () => {
    it("refresh only with the operator credential", async () => {
      const { token } = await operatorGrant();
      // The refresh token alone, or with a wrong operator credential: invalid_client.
      await expectGrpcRefused(refresh(token.refresh_token), grpc.status.UNAUTHENTICATED, /^client authentication failed$/);
      await expectGrpcRefused(
        refresh(token.refresh_token, operator(randomBytes(16).toString("hex"))),
        grpc.status.UNAUTHENTICATED,
        /^client authentication failed$/,
      );
      await expectRefused(stack.clients.grants.refreshGrant({ refreshToken: token.refresh_token }), Reason.INVALID_CLIENT);
      // Nothing was used up: the operator then refreshes it.
      const next = await refresh(token.refresh_token, operator());
      expect(next.jti).to.not.equal(token.jti);
      expect(next.refresh_token).to.match(/^vgr_[A-Za-z0-9_-]{43}$/);
      await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: token.access_token }), Reason.INVALID_TOKEN);
      await stack.clients.grants.verifyAgentToken({ accessToken: next.access_token });
    });

    it("a client cannot refresh an operator grant, and the operator credential alone cannot refresh a client's grant", async () => {
      const op = await operatorGrant();
      const cg = await clientGrant();
      // invalid_grant (INVALID_ARGUMENT). grpc-js leaves the message's percent-encoded comma
      // as "%2C" (it decodes grpc-message with decodeURI), so only its start is compared.
      for (const attempt of [
        () => refresh(op.token.refresh_token, operator(), cg.creds),
        () => refresh(op.token.refresh_token, undefined, cg.creds),
        () => refresh(cg.token.refresh_token, operator()),
      ]) {
        await expectGrpcRefused(attempt(), grpc.status.INVALID_ARGUMENT, /^the refresh token is invalid/);
      }
      // Both grants are untouched.
      await stack.clients.grants.verifyAgentToken({ accessToken: op.token.access_token });
      await stack.clients.grants.verifyAgentToken({ accessToken: cg.token.access_token });
    });

    it("a retry in the grace window gets the same refresh token; reuse after it revokes the lineage", async () => {
      const { token } = await operatorGrant();
      const r1 = await refresh(token.refresh_token, operator());
      stack.clock.advance(10_000);
      const retry = await refresh(token.refresh_token, operator());
      expect(retry.jti).to.equal(r1.jti);
      expect(retry.refresh_token).to.equal(r1.refresh_token);
      // The same access token's lifetime: what is left of it, not a fresh hour.
      const exp = (t: Token) => JSON.parse(Buffer.from(t.access_token.split(".")[1]!, "base64url").toString()).exp;
      expect(exp(retry)).to.equal(exp(r1));
      expect([r1.expires_in, retry.expires_in]).to.deep.equal(["3600", "3590"]);
      // The retry without the operator credential is refused and changes nothing.
      await expectGrpcRefused(refresh(token.refresh_token), grpc.status.UNAUTHENTICATED);
      stack.clock.advance(21_000);
      await expectGrpcRefused(refresh(token.refresh_token, operator()), grpc.status.INVALID_ARGUMENT);
      await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: r1.access_token }), Reason.INVALID_TOKEN);
      await expectGrpcRefused(refresh(r1.refresh_token, operator()), grpc.status.INVALID_ARGUMENT);
    });

    it("a used refresh token replayed 40 days later, past its own lifetime and a pruning pass, still revokes the live lineage", async () => {
      const { u, token } = await operatorGrant();
      const r1 = await refresh(token.refresh_token, operator());
      stack.clock.advance(20 * 24 * 3600_000);
      const r2 = await refresh(r1.refresh_token, operator());
      stack.clock.advance(20 * 24 * 3600_000);
      const r3 = await refresh(r2.refresh_token, operator());
      await stack.core.prune(); // the pruner keeps every grant: the replay is recognized by its row
      const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM grants WHERE user_id = ?`, [u.userId]);
      expect(rows[0].n).to.equal(4);

      // A thief replays the first token, used 40 days ago (its lifetime is 30 days).
      await expectGrpcRefused(refresh(token.refresh_token, operator()), grpc.status.INVALID_ARGUMENT);
      // The lineage's live member, whose token was fresh, is revoked with it.
      await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: r3.access_token }), Reason.INVALID_TOKEN);
      await expectGrpcRefused(refresh(r3.refresh_token, operator()), grpc.status.INVALID_ARGUMENT);
    });
  });

  describe("concurrency", () => {
    it("one refresh token presented many times at once issues one successor, and every answer carries its refresh token", async () => {
      const { u, creds, token } = await clientGrant();
      // On PostgreSQL these race through the group-committed fast path and the row lock;
      // on PGlite they serialize. Either way: one lineage, one successor, one token.
      const results = await Promise.all(Array.from({ length: 12 }, () => refresh(token.refresh_token, undefined, creds)));
      expect(new Set(results.map((r) => r.jti)).size).to.equal(1);
      expect(new Set(results.map((r) => r.refresh_token)).size).to.equal(1);
      const { rows } = await stack.core.db.raw(`SELECT id, refresh_hash FROM grants WHERE user_id = ? AND state = 'active'`, [u.userId]);
      expect(rows).to.have.length(1);
      expect(rows[0].id).to.equal(results[0]!.jti);
      expect(rows[0].refresh_hash).to.equal(sha(results[0]!.refresh_token));
    });

    it("a thief's replay of a used token racing the holder's refreshes of the live one leaves no member of the lineage usable", async () => {
      // On PostgreSQL the replays and the refreshes run at once (fast path, row locks,
      // the revocation); whichever commits first, nothing the lineage issued may survive.
      for (let round = 0; round < 12; round++) {
        const { u, creds, token } = await clientGrant();
        const r1 = await refresh(token.refresh_token, undefined, creds);
        stack.clock.advance(31_000); // past the grace window: presenting t0 again is reuse
        const calls = Array.from({ length: 16 }, (_, i) =>
          i % 2 === 0
            ? grpcRefusalOf(refresh(token.refresh_token, undefined, creds)).then((e) => ({ thief: e }))
            : refresh(r1.refresh_token, undefined, creds).then(
                (t) => ({ holder: t }),
                (e: grpc.ServiceError) => ({ holderRefused: e.code }),
              ),
        );
        const outcomes = await Promise.all(calls);
        for (const o of outcomes) {
          if ("thief" in o) expect(o.thief.code).to.equal(grpc.status.INVALID_ARGUMENT);
          if ("holderRefused" in o) expect(o.holderRefused).to.equal(grpc.status.INVALID_ARGUMENT);
        }
        const issued = outcomes.flatMap((o) => ("holder" in o ? [o.holder] : []));
        for (const t of [r1, ...issued]) {
          await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: t.access_token }), Reason.INVALID_TOKEN);
          await expectGrpcRefused(refresh(t.refresh_token, undefined, creds), grpc.status.INVALID_ARGUMENT);
        }
        const { rows } = await stack.core.db.raw(`SELECT count(*)::int AS n FROM grants WHERE user_id = ? AND state = 'active'`, [u.userId]);
        expect(rows[0].n).to.equal(0);
      }
    });
  });
});
