import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, TEST_ISSUER, type TestStack } from "../../support/stack.js";
import { expectRefused } from "../../support/refusals.js";

describe("grants core: operator grants, verification, supersede, kill switch", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ mcpUrl: "http://mcp.test", scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  async function user() {
    return stack.admin.partners.createUser({ email: `u-${randomBytes(4).toString("hex")}@example.com` });
  }

  it("issues a token with exactly the agent token claims and verifies it", async () => {
    const u = await user();
    const { token } = await stack.admin.grants.issueGrant({
      userId: u.userId,
      vaultId: u.vaultId,
      scopes: ["accounts:read", "payments:initiate"],
      stepUp: true,
    });
    expect(token!.tokenType).to.equal("Bearer");
    expect(Number(token!.expiresIn)).to.equal(3600);
    expect(token!.scope).to.equal("accounts:read payments:initiate");
    const header = decodeProtectedHeader(token!.accessToken);
    expect(header.typ).to.equal("at+jwt");
    expect(header.alg).to.equal("ES256");
    const c = decodeJwt(token!.accessToken);
    expect(Object.keys(c).sort()).to.deep.equal(["acr", "act", "aud", "auth_time", "client_id", "exp", "iat", "iss", "jti", "nbf", "scope", "sub", "vault_id"]);
    expect(c.iss).to.equal(TEST_ISSUER);
    expect(c.aud).to.deep.equal(["http://mcp.test", `urn:vaultgate:vault:${u.vaultId}`]);
    expect(c.sub).to.equal(u.userId);
    expect(c.jti).to.equal(token!.jti);
    expect(c.nbf).to.equal(c.iat);
    expect(c.exp).to.equal((c.iat as number) + 3600);
    expect(c.acr).to.equal("step-up");

    const { grant } = await stack.clients.grants.verifyAgentToken({ accessToken: token!.accessToken });
    expect(grant!.grantId).to.equal(token!.jti);
    expect(grant!.userId).to.equal(u.userId);
    expect(grant!.vaultId).to.equal(u.vaultId);
    expect(grant!.agentPrincipalId).to.equal((c.act as { sub: string }).sub);
    expect(grant!.scopes).to.deep.equal(["accounts:read", "payments:initiate"]);
    expect(grant!.stepUp).to.equal(true);
    expect(Number(grant!.authTime)).to.equal(c.auth_time);
  });

  it("refuses missing, tampered and expired tokens with INVALID_TOKEN", async () => {
    const u = await user();
    const { token } = await stack.admin.grants.issueGrant({ userId: u.userId, vaultId: u.vaultId, scopes: ["accounts:read"] });
    await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: "" }), Reason.INVALID_TOKEN);
    const [h, p, s] = token!.accessToken.split(".");
    const forged = Buffer.from(JSON.stringify({ ...decodeJwt(token!.accessToken), scope: "payments:initiate" })).toString("base64url");
    await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: `${h}.${forged}.${s}` }), Reason.INVALID_TOKEN);
    expect(p).to.be.a("string");
    const clock = stack.clock;
    clock.advance(3600_000 + 31_000);
    try {
      await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: token!.accessToken }), Reason.INVALID_TOKEN);
    } finally {
      clock.advance(-(3600_000 + 31_000));
    }
  });

  it("supersedes without widening, and the old token is refused at once", async () => {
    const u = await user();
    const { token } = await stack.admin.grants.issueGrant({ userId: u.userId, vaultId: u.vaultId, scopes: ["accounts:read", "payments:simulate"] });
    await expectRefused(stack.clients.grants.supersedeGrant({ accessToken: token!.accessToken, scope: "payments:initiate" }), Reason.INVALID_SCOPE);
    const next = await stack.clients.grants.supersedeGrant({ accessToken: token!.accessToken, scope: "accounts:read" });
    expect(next.token!.scope).to.equal("accounts:read");
    expect(next.token!.jti).to.not.equal(token!.jti);
    await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: token!.accessToken }), Reason.INVALID_TOKEN);
    const { grant } = await stack.clients.grants.verifyAgentToken({ accessToken: next.token!.accessToken });
    expect(grant!.scopes).to.deep.equal(["accounts:read"]);
    // An empty scope keeps the current scopes.
    const again = await stack.clients.grants.supersedeGrant({ accessToken: next.token!.accessToken, scope: "" });
    expect(again.token!.scope).to.equal("accounts:read");
  });

  it("killSwitch.all revokes every grant of the user and no one else's", async () => {
    const u = await user();
    const other = await user();
    const a = await stack.admin.grants.issueGrant({ userId: u.userId, vaultId: u.vaultId, scopes: ["accounts:read"] });
    const b = await stack.admin.grants.issueGrant({ userId: u.userId, vaultId: u.vaultId, scopes: ["audit:stream"] });
    const o = await stack.admin.grants.issueGrant({ userId: other.userId, vaultId: other.vaultId, scopes: ["accounts:read"] });
    const res = await stack.clients.grants.revokeAllGrants({ accessToken: a.token!.accessToken, reason: "test" });
    expect(res.revoked).to.equal(2);
    await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: a.token!.accessToken }), Reason.INVALID_TOKEN);
    await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: b.token!.accessToken }), Reason.INVALID_TOKEN);
    await stack.clients.grants.verifyAgentToken({ accessToken: o.token!.accessToken });
  });

  it("operator grants refuse vaults of other users and unknown scopes; IssueGrant is admin-only", async () => {
    const u = await user();
    const other = await user();
    await expectRefused(stack.admin.grants.issueGrant({ userId: u.userId, vaultId: other.vaultId, scopes: ["accounts:read"] }), Reason.INVALID_TARGET);
    await expectRefused(stack.admin.grants.issueGrant({ userId: u.userId, vaultId: u.vaultId, scopes: ["treasury:write"] }), Reason.INVALID_SCOPE);
    await expectRefused(stack.clients.grants.issueGrant({ userId: u.userId, vaultId: u.vaultId, scopes: ["accounts:read"] }), Reason.ADMIN_UNAUTHENTICATED);
  });

  it("an inactive user's grants are refused at verification", async () => {
    const u = await user();
    const { token } = await stack.admin.grants.issueGrant({ userId: u.userId, vaultId: u.vaultId, scopes: ["accounts:read"] });
    await stack.clients.grants.verifyAgentToken({ accessToken: token!.accessToken });
    // No RPC sets a user's status yet (raw SQL only for states no RPC can produce).
    await stack.core.db.raw(`UPDATE users SET status = 'inactive' WHERE id = ?`, [u.userId]);
    await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: token!.accessToken }), Reason.INVALID_TOKEN);
  });

  it("operator grants without a client refresh only with the operator credential", async () => {
    const u = await user();
    const { token } = await stack.admin.grants.issueGrant({ userId: u.userId, vaultId: u.vaultId, scopes: ["accounts:read"] });
    // The refresh token alone is not enough (test/core/grants/refresh-tokens.test.ts covers more).
    await expectRefused(stack.clients.grants.refreshGrant({ refreshToken: token!.refreshToken, clientId: "", clientSecret: "" }), Reason.INVALID_CLIENT);
    const r = await stack.admin.grants.refreshGrant({ refreshToken: token!.refreshToken, clientId: "", clientSecret: "" });
    expect(r.token!.jti).to.not.equal(token!.jti);
    await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: token!.accessToken }), Reason.INVALID_TOKEN);
  });
});
