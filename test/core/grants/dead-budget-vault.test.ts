import { expect } from "chai";
import { Code } from "@connectrpc/connect";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { ALL_AGENT_SCOPES, budgetParams, createOwner, grantFor, ownerSession } from "../../support/budgets.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";
import { budgetUnderRoot } from "../../support/budget-life.js";
import { pkce } from "../../support/agent-oauth.js";
import { requirePostgres } from "../../support/db.js";

const REDIRECT = "http://127.0.0.1:9/callback";
const urn = (vaultId: string) => `urn:vaultgate:vault:${vaultId}`;

/** No grant binds a closed or declined budget's vault: operator issue, consent, code exchange. */
describe("Grants on closed and declined budget vaults", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  async function client() {
    const registered = await stack.clients.grants.registerClient({
      clientName: "Late agent",
      redirectUris: [REDIRECT],
      grantTypes: ["authorization_code", "refresh_token"],
      responseTypes: ["code"],
      tokenEndpointAuthMethod: "client_secret_post",
      scope: "accounts:read",
    });
    return { clientId: registered.client!.clientId, clientSecret: registered.clientSecret };
  }

  /** An owner's budget, closed by the parent's agent (keep_funds, so money stays in it). */
  async function closedBudget() {
    const life = await budgetUnderRoot(stack, { parentCents: 1_000n });
    await stack.clients.budgets.fundBudget({
      accessToken: life.parentToken,
      vaultId: life.child.vaultId,
      amountCents: 400n,
      idempotencyKey: "fund-before-close",
    });
    await stack.clients.budgets.closeBudget({ accessToken: life.parentToken, vaultId: life.child.vaultId, keepFunds: true });
    return life;
  }

  async function declinedBudget() {
    const owner = await createOwner(stack);
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
    await stack.clients.budgets.declineBudget({ sessionToken: await ownerSession(stack, owner.userId), agentPrincipalId: budget!.agentPrincipalId });
    return { owner, child: { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId } };
  }

  const activeGrantsOn = async (vaultId: string) => stack.core.db("grants").where({ vault_id: vaultId, state: "active" });

  it("IssueGrant (vaultgate grant issue) refuses a closed and a declined budget's vault with invalid_target", async () => {
    const closed = await closedBudget();
    const declined = await declinedBudget();
    for (const [userId, vaultId, why] of [
      [closed.owner.userId, closed.child.vaultId, "the vault belongs to a closed budget"],
      [declined.owner.userId, declined.child.vaultId, "the vault belongs to a budget its owner declined"],
    ] as const) {
      const refused = await refusalOf(stack.admin.grants.issueGrant({ userId, vaultId: vaultId.toUpperCase(), scopes: ALL_AGENT_SCOPES, stepUp: true }));
      expect([refused.code, refused.detail?.reason, refused.message]).to.deep.equal([Code.InvalidArgument, Reason.INVALID_TARGET, why]);
      expect(await activeGrantsOn(vaultId)).to.deep.equal([]);
    }
    // An open budget's vault and the parent vault still take grants.
    const open = await budgetUnderRoot(stack);
    expect(
      (await stack.admin.grants.issueGrant({ userId: open.owner.userId, vaultId: open.child.vaultId, scopes: ["accounts:read"] })).token!.accessToken,
    ).to.be.a("string");
    expect(
      (await stack.admin.grants.issueGrant({ userId: closed.owner.userId, vaultId: closed.owner.vaultId, scopes: ["accounts:read"] })).token!.accessToken,
    ).to.be.a("string");
  });

  it("the consent approval refuses a closed or declined budget's vault, named as the resource or picked; no code is made", async () => {
    const { clientId } = await client();
    for (const { owner, child } of [await closedBudget(), await declinedBudget()]) {
      const session = await ownerSession(stack, owner.userId, { stepUp: true });
      const request = (resources: string[]) => ({
        clientId,
        redirectUri: REDIRECT,
        scope: "accounts:read",
        resources,
        codeChallenge: pkce().challenge,
        codeChallengeMethod: "S256",
      });
      for (const [resources, vaultId] of [
        [[urn(child.vaultId)], ""],
        [[], child.vaultId],
      ] as const) {
        const refused = await expectRefused(
          stack.clients.grants.approveAuthorization({ request: request([...resources]), sessionToken: session, vaultId }),
          Reason.INVALID_TARGET,
        );
        expect(refused.message).to.match(/^the vault belongs to a (closed budget|budget its owner declined)$/);
      }
      expect(await stack.core.db("authorization_codes").where({ vault_id: child.vaultId })).to.deep.equal([]);
    }
  });

  it("a code approved before the close is refused at the exchange (both exchange paths) and stays unused", async () => {
    const { clientId, clientSecret } = await client();
    const life = await budgetUnderRoot(stack, { parentCents: 1_000n });
    const session = await ownerSession(stack, life.owner.userId, { stepUp: true });
    const consent = async () => {
      const { verifier, challenge } = pkce();
      const { code } = await stack.clients.grants.approveAuthorization({
        request: {
          clientId,
          redirectUri: REDIRECT,
          scope: "accounts:read",
          resources: [urn(life.child.vaultId)],
          codeChallenge: challenge,
          codeChallengeMethod: "S256",
        },
        sessionToken: session,
      });
      return { code, verifier };
    };
    // Without a resource the exchange takes the group-committed path; with the vault URN the locked one.
    const codes = [await consent(), await consent()];
    await stack.clients.budgets.closeBudget({ accessToken: life.parentToken, vaultId: life.child.vaultId });
    for (const [i, c] of codes.entries()) {
      const resources = i === 0 ? [] : [urn(life.child.vaultId)];
      const refused = await refusalOf(
        stack.clients.grants.exchangeCode({ clientId, clientSecret, code: c.code, redirectUri: REDIRECT, codeVerifier: c.verifier, resources }),
      );
      expect([refused.detail?.reason, refused.message]).to.deep.equal([
        Reason.INVALID_GRANT,
        "the authorization code cannot be used: the vault belongs to a closed budget",
      ]);
    }
    expect(await activeGrantsOn(life.child.vaultId)).to.deep.equal([]);
    const rows = await stack.core.db("authorization_codes").where({ vault_id: life.child.vaultId });
    expect(rows.map((r) => r.consumed_at)).to.deep.equal([null, null]);
  });

  it("a refresh on a declined or closed budget's vault issues no new grant (the group-committed path leaves budget vaults to the locked one)", async () => {
    // Declined: grants issued on the draft before the decline keep no way to renew themselves.
    const owner = await createOwner(stack);
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
    const before = await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: budget!.vaultId, scopes: ["accounts:read"] });
    await stack.clients.budgets.declineBudget({ sessionToken: await ownerSession(stack, owner.userId), agentPrincipalId: budget!.agentPrincipalId });
    await expectRefused(stack.admin.grants.refreshGrant({ refreshToken: before.token!.refreshToken }), Reason.INVALID_GRANT);
    // The decline revoked it too, so its access token stopped at once.
    expect((await stack.core.db("grants").where({ vault_id: budget!.vaultId })).map((g) => [g.state, g.state_reason])).to.deep.equal([
      ["revoked", "budget_declined"],
    ]);
    // Closed: the close revoked them, and a refresh is refused as before.
    const life = await budgetUnderRoot(stack);
    const onChild = await stack.admin.grants.issueGrant({ userId: life.owner.userId, vaultId: life.child.vaultId, scopes: ["accounts:read"] });
    await stack.clients.budgets.closeBudget({ accessToken: life.parentToken, vaultId: life.child.vaultId });
    await expectRefused(stack.admin.grants.refreshGrant({ refreshToken: onChild.token!.refreshToken }), Reason.INVALID_GRANT);
    expect(await activeGrantsOn(life.child.vaultId)).to.deep.equal([]);
    // An open budget's grants still refresh.
    const open = await budgetUnderRoot(stack);
    const live = await stack.admin.grants.issueGrant({ userId: open.owner.userId, vaultId: open.child.vaultId, scopes: ["accounts:read"] });
    expect((await stack.admin.grants.refreshGrant({ refreshToken: live.token!.refreshToken })).token!.accessToken).to.be.a("string");
  });

  it("agent.grant.issue on a declined budget's vault issues no new grant: the old one cannot renew itself that way either", async () => {
    const owner = await createOwner(stack);
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
    const draft = await stack.admin.grants.issueGrant({ userId: owner.userId, vaultId: budget!.vaultId, scopes: ["accounts:read"] });
    // On the draft the agent may still reissue its grant.
    const { token } = await stack.clients.grants.supersedeGrant({ accessToken: draft.token!.accessToken });
    await stack.clients.budgets.declineBudget({ sessionToken: await ownerSession(stack, owner.userId), agentPrincipalId: budget!.agentPrincipalId });
    // The decline revoked it; a grant row that reached the vault anyway still cannot renew itself.
    await expectRefused(stack.clients.grants.supersedeGrant({ accessToken: token!.accessToken }), Reason.INVALID_TOKEN);
    const late = await grantFor(stack, { userId: owner.userId, vaultId: budget!.vaultId, agentPrincipalId: budget!.agentPrincipalId });
    for (let i = 0; i < 3; i++) {
      const refused = await expectRefused(stack.clients.grants.supersedeGrant({ accessToken: late }), Reason.INVALID_TARGET);
      expect(refused.message).to.equal("the vault belongs to a budget its owner declined");
    }
    expect(await activeGrantsOn(budget!.vaultId)).to.have.length(1);
  });

  it("a close racing many refreshes of the budget's grants leaves none active (PostgreSQL)", async function () {
    requirePostgres(this, "racing transactions need several connections");
    for (let round = 0; round < 8; round++) {
      const life = await budgetUnderRoot(stack);
      const issued = await Promise.all(
        Array.from({ length: 40 }, () => stack.admin.grants.issueGrant({ userId: life.owner.userId, vaultId: life.child.vaultId, scopes: ["accounts:read"] })),
      );
      const calls: Promise<unknown>[] = issued.map((t) => stack.admin.grants.refreshGrant({ refreshToken: t.token!.refreshToken }));
      calls.splice(round * 4, 0, stack.clients.budgets.closeBudget({ accessToken: life.parentToken, vaultId: life.child.vaultId }));
      const settled = await Promise.allSettled(calls);
      for (const r of settled) if (r.status === "rejected") await expectRefused(Promise.reject(r.reason), Reason.INVALID_GRANT);
      expect(await activeGrantsOn(life.child.vaultId)).to.deep.equal([]);
    }
  });

  it("a close or decline racing many agent.grant.issue calls: afterwards none is active and none reissues (PostgreSQL)", async function () {
    requirePostgres(this, "racing transactions need several connections");
    const supersede = (accessToken: string) => stack.clients.grants.supersedeGrant({ accessToken });
    for (const end of ["close", "decline"] as const) {
      const owner = await createOwner(stack);
      const { budget } = await stack.clients.budgets.createBudget({ accessToken: await grantFor(stack, owner), ...budgetParams() });
      const vaultId = budget!.vaultId;
      const issued = await Promise.all(
        Array.from({ length: 20 }, () => stack.admin.grants.issueGrant({ userId: owner.userId, vaultId, scopes: ["accounts:read"] })),
      );
      const session = await ownerSession(stack, owner.userId, { stepUp: true });
      const ending =
        end === "close"
          ? stack.clients.budgets.closeBudget({ sessionToken: session, vaultId })
          : stack.clients.budgets.declineBudget({ sessionToken: session, agentPrincipalId: budget!.agentPrincipalId });
      const calls: Promise<unknown>[] = issued.map((t) => supersede(t.token!.accessToken));
      calls.splice(
        10,
        0,
        ending.then(() => undefined),
      );
      const tokens = new Map(issued.map((t) => [t.token!.jti, t.token!.accessToken]));
      for (const r of await Promise.allSettled(calls)) {
        if (r.status === "rejected") expect([Reason.INVALID_TARGET, Reason.INVALID_TOKEN]).to.include((await refusalOf(Promise.reject(r.reason))).reason);
        else if (r.value && typeof r.value === "object" && "token" in r.value) {
          const t = (r.value as { token: { jti: string; accessToken: string } }).token;
          tokens.set(t.jti, t.accessToken);
        }
      }
      // Either end revokes every grant on the vault, the ones committed just before it included.
      expect(await activeGrantsOn(vaultId)).to.deep.equal([]);
      for (const token of tokens.values()) await expectRefused(supersede(token), Reason.INVALID_TOKEN);
    }
  });

  it("a close racing many grant issues, consents and exchanges leaves no active grant on the closed vault (PostgreSQL)", async function () {
    requirePostgres(this, "racing transactions need several connections");
    const { clientId, clientSecret } = await client();
    for (let round = 0; round < 3; round++) {
      const life = await budgetUnderRoot(stack, { parentCents: 1_000n });
      const session = await ownerSession(stack, life.owner.userId, { stepUp: true });
      const consented = await Promise.all(
        Array.from({ length: 6 }, async () => {
          const { verifier, challenge } = pkce();
          const { code } = await stack.clients.grants.approveAuthorization({
            request: {
              clientId,
              redirectUri: REDIRECT,
              scope: "accounts:read",
              resources: [urn(life.child.vaultId)],
              codeChallenge: challenge,
              codeChallengeMethod: "S256",
            },
            sessionToken: session,
          });
          return { code, verifier };
        }),
      );
      const calls: Promise<unknown>[] = [];
      for (let i = 0; i < 12; i++)
        calls.push(stack.admin.grants.issueGrant({ userId: life.owner.userId, vaultId: life.child.vaultId, scopes: ["accounts:read"] }));
      for (const [i, c] of consented.entries()) {
        calls.push(
          stack.clients.grants.exchangeCode({
            clientId,
            clientSecret,
            code: c.code,
            redirectUri: REDIRECT,
            codeVerifier: c.verifier,
            resources: i % 2 ? [urn(life.child.vaultId)] : [],
          }),
        );
      }
      for (let i = 0; i < 4; i++) {
        const { challenge } = pkce();
        calls.push(
          stack.clients.grants.approveAuthorization({
            request: {
              clientId,
              redirectUri: REDIRECT,
              scope: "accounts:read",
              resources: [urn(life.child.vaultId)],
              codeChallenge: challenge,
              codeChallengeMethod: "S256",
            },
            sessionToken: session,
          }),
        );
      }
      calls.splice(6, 0, stack.clients.budgets.closeBudget({ accessToken: life.parentToken, vaultId: life.child.vaultId }));
      const settled = await Promise.allSettled(calls);
      for (const s of settled) {
        if (s.status === "rejected")
          expect([Reason.INVALID_TARGET, Reason.INVALID_GRANT]).to.include((await refusalOf(Promise.reject(s.reason))).detail?.reason);
      }
      expect(settled.filter((s) => s.status === "rejected").length, "some calls came after the close").to.be.greaterThan(0);
      expect(await activeGrantsOn(life.child.vaultId)).to.deep.equal([]);
      // Codes approved before the close cannot mint one later either.
      for (const c of consented)
        await stack.clients.grants
          .exchangeCode({ clientId, clientSecret, code: c.code, redirectUri: REDIRECT, codeVerifier: c.verifier })
          .catch(() => undefined);
      expect(await activeGrantsOn(life.child.vaultId)).to.deep.equal([]);
    }
  });
});
