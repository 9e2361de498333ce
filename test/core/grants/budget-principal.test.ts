import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { decodeJwt } from "jose";
import { BudgetStatus } from "../../../gen/vaultgate/budgets/v1/budgets_pb.js";
import { PaymentStatus } from "../../../gen/vaultgate/budgets/v1/payments_pb.js";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { authorize, createJar, createUser, pkce, postForm, registerClient, type Jar } from "../../support/agent-oauth.js";
import { ALL_AGENT_SCOPES, budgetParams, ownerSession, payment } from "../../support/budgets.js";
import { expectRefused, refusalOf } from "../../support/refusals.js";
import { postRpc } from "../../support/mcp.js";
import { requirePostgres } from "../../support/db.js";

const REDIRECT = "http://127.0.0.1:9/callback";
const urn = (vaultId: string) => `urn:vaultgate:vault:${vaultId}`;
const actOf = (accessToken: string) => (decodeJwt(accessToken).act as { sub: string }).sub;
const jtiOf = (accessToken: string) => decodeJwt(accessToken).jti as string;

type Owner = { email: string; userId: string; vaultId: string };

/**
 * A grant on a budget's vault, however issued, acts as the budget's own principal (act.sub, payments,
 * audit); grants on other vaults keep the user's and client's. The dashboard lists and revokes them.
 */
describe("grants on a budget's vault act as the budget's agent principal", () => {
  let stack: TestStack;
  before(async () => {
    // The concurrency test below makes 24 code exchanges at once, each a client-secret
    // check: a queue long enough for all of them, so none is shed as overloaded (shedding
    // has its own tests; this one is about which principal each grant gets).
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 }, secretChecks: { maxQueue: 64, maxWaitMs: 60_000 } });
  });
  after(() => stack.close());

  const rpc = (path: string, token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}${path}`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
  const payArgs = (amount: number) => ({
    counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
    amount_cents: amount,
    currency: "USD",
    idempotency_key: `pay-${randomBytes(6).toString("hex")}`,
  });
  const perClientPrincipal = async (userId: string, clientKey: string): Promise<string | undefined> =>
    (await stack.core.db("oauth_agents").where({ user_id: userId, client_id: clientKey }).first("agent_principal_id"))?.agent_principal_id;

  /** A user with an active budget (created by an operator grant with a fresh step-up) holding $1000.00. */
  async function ownerWithBudget(name = `Budget ${randomBytes(3).toString("hex")}`) {
    const user: Owner = await createUser(stack);
    const parent = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true })).token!;
    const { budget } = await stack.clients.budgets.createBudget({
      accessToken: parent.accessToken,
      ...budgetParams({ displayName: name, chainAllowlist: ["base"] }),
    });
    expect(budget!.status).to.equal(BudgetStatus.ACTIVE);
    await stack.admin.budgets.fundVault({ vaultId: budget!.vaultId, amountCents: 100_000n });
    return { user, parent, budget: budget!, name };
  }

  /** Consent over the real pages for `client` on `vaultId`, and the code exchanged at the token endpoint. */
  async function oauthToken(
    jar: Jar,
    user: Owner,
    client: { client_id: string; client_secret: string },
    vaultId: string,
    scope: string,
    exchangeResource?: string,
  ) {
    const { verifier, challenge } = pkce();
    const back = await authorize(stack, jar, user.email, {
      response_type: "code",
      client_id: client.client_id,
      redirect_uri: REDIRECT,
      code_challenge: challenge,
      code_challenge_method: "S256",
      scope,
      resource: urn(vaultId),
      state: "s",
    });
    const code = back.searchParams.get("code");
    expect(code, back.toString()).to.be.a("string");
    // A `resource` at the token endpoint takes the locked path; without one, the one-statement path.
    const res = await postForm(`${stack.url}/oauth2/token`, {
      grant_type: "authorization_code",
      code: code!,
      redirect_uri: REDIRECT,
      code_verifier: verifier,
      client_id: client.client_id,
      client_secret: client.client_secret,
      ...(exchangeResource ? { resource: exchangeResource } : {}),
    });
    expect(res.status, JSON.stringify(res.body)).to.equal(200);
    return res.body as { access_token: string; refresh_token: string; jti: string };
  }

  it("operator IssueGrant on a budget's vault: act.sub, payments and audit name the budget; the parent vault keeps the per-client principal", async () => {
    const { user, parent, budget } = await ownerWithBudget();
    const operatorPrincipal = await perClientPrincipal(user.userId, "");
    expect(actOf(parent.accessToken)).to.equal(operatorPrincipal);
    expect(operatorPrincipal).to.not.equal(budget.agentPrincipalId);

    const onBudget = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: budget.vaultId, scopes: ALL_AGENT_SCOPES })).token!;
    expect(actOf(onBudget.accessToken)).to.equal(budget.agentPrincipalId);
    expect(decodeJwt(onBudget.accessToken).vault_id).to.equal(budget.vaultId);
    const { grant } = await stack.clients.grants.verifyAgentToken({ accessToken: onBudget.accessToken });
    expect(grant!.agentPrincipalId).to.equal(budget.agentPrincipalId);

    // A payment over JSON-RPC: the row and its audit record name the budget.
    const paid = await rpc("/mcp/write", onBudget.accessToken, "payments.initiate", payArgs(1_500));
    expect(paid.json!.result, paid.text).to.include({ kind: "accepted", status: "completed" });
    const paymentId = paid.json!.result.payment_id as string;
    expect((await stack.core.db("agent_payments").where({ id: paymentId }).first()).agent_principal_id).to.equal(budget.agentPrincipalId);
    const audit = await stack.core.db("audit_records").where({ subject: paymentId, action: "payments.initiate" });
    expect(audit.map((r: { actor: string }) => r.actor)).to.deep.equal([`agent:${budget.agentPrincipalId}`]);

    // One that waits for the owner: its step-up link leads to the budget's agent page.
    const pending = await stack.clients.budgets.initiatePayment({ accessToken: onBudget.accessToken, payment: payment({ amountCents: 6_000n }) });
    expect(pending.payment!.status).to.equal(PaymentStatus.PENDING_STEP_UP);
    expect(pending.payment!.agentPrincipalId).to.equal(budget.agentPrincipalId);
    expect(pending.payment!.stepUpUrl).to.include(`/dashboard/agents/${budget.agentPrincipalId}?payment=${pending.payment!.paymentId}`);

    // Reads are audited under the same actor.
    await stack.clients.budgets.getBalance({ accessToken: onBudget.accessToken });
    expect(
      await stack.core.db("audit_records").where({ actor: `agent:${budget.agentPrincipalId}`, action: "accounts.balance", subject: budget.vaultId }),
    ).to.have.length(1);

    // agent.grant.issue and the operator refresh keep the lineage's principal.
    const narrowed = (await stack.clients.grants.supersedeGrant({ accessToken: onBudget.accessToken, scope: "accounts:read payments:initiate" })).token!;
    expect(actOf(narrowed.accessToken)).to.equal(budget.agentPrincipalId);
    const refreshed = (await stack.admin.grants.refreshGrant({ refreshToken: narrowed.refreshToken })).token!;
    expect(actOf(refreshed.accessToken)).to.equal(budget.agentPrincipalId);

    // The parent vault's grants still act as the operator's per-client principal.
    const onParent = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ["accounts:read"] })).token!;
    expect(actOf(onParent.accessToken)).to.equal(operatorPrincipal);
  });

  it("the OAuth code flow on a budget's vault acts as the budget (both exchange paths, and refresh); on the parent vault as the client's principal", async () => {
    const { user, budget } = await ownerWithBudget();
    const client = (await registerClient(stack)).body;
    const jar = createJar(stack.url);

    const first = await oauthToken(jar, user, client, budget.vaultId, "accounts:read payments:initiate");
    expect(actOf(first.access_token)).to.equal(budget.agentPrincipalId);
    expect(decodeJwt(first.access_token).client_id).to.equal(client.client_id);
    // Consent on a budget's vault creates no principal for the client.
    expect(await perClientPrincipal(user.userId, client.client_id)).to.equal(undefined);

    const paid = await rpc("/mcp/write", first.access_token, "payments.initiate", payArgs(2_000));
    expect(paid.json!.result, paid.text).to.include({ kind: "accepted" });
    const paymentId = paid.json!.result.payment_id as string;
    expect((await stack.core.db("agent_payments").where({ id: paymentId }).first()).agent_principal_id).to.equal(budget.agentPrincipalId);
    expect((await stack.core.db("audit_records").where({ subject: paymentId }).first()).actor).to.equal(`agent:${budget.agentPrincipalId}`);

    const refreshed = await postForm(`${stack.url}/oauth2/token`, {
      grant_type: "refresh_token",
      refresh_token: first.refresh_token,
      client_id: client.client_id,
      client_secret: client.client_secret,
    });
    expect(refreshed.status).to.equal(200);
    expect(actOf(refreshed.body.access_token as string)).to.equal(budget.agentPrincipalId);

    const locked = await oauthToken(jar, user, client, budget.vaultId, "accounts:read", urn(budget.vaultId));
    expect(actOf(locked.access_token)).to.equal(budget.agentPrincipalId);

    const onParent = await oauthToken(jar, user, client, user.vaultId, "accounts:read", urn(user.vaultId));
    const clientPrincipal = await perClientPrincipal(user.userId, client.client_id);
    expect(clientPrincipal).to.be.a("string");
    expect(actOf(onParent.access_token)).to.equal(clientPrincipal);
    expect(clientPrincipal).to.not.equal(budget.agentPrincipalId);
  });

  it("the dashboard lists the budget's principal with its grants, revokes them, and the kill switch reaches them", async () => {
    const { user, budget, name } = await ownerWithBudget();
    // A second budget nobody holds a grant on is not listed.
    const idle = (
      await stack.clients.budgets.createBudget({
        accessToken: (
          await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true })
        ).token!.accessToken,
        ...budgetParams({ displayName: "Idle budget" }),
      })
    ).budget!;
    const a = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: budget.vaultId, scopes: ALL_AGENT_SCOPES })).token!;
    const b = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: budget.vaultId, scopes: ["accounts:read"] })).token!;
    const session = await ownerSession(stack, user.userId);
    const operatorPrincipal = await perClientPrincipal(user.userId, "");

    const { agents } = await stack.clients.grants.listAgents({ sessionToken: session });
    const listed = agents.find((x) => x.agentId === budget.agentPrincipalId);
    expect(listed, JSON.stringify(agents.map((x) => x.displayName))).to.not.equal(undefined);
    // The parent grant was operator-issued: no client to name.
    expect(listed!.displayName).to.equal(name);
    expect(listed!.clientId).to.equal("");
    expect(listed!.activeGrants).to.equal(2);
    expect(listed!.grants.map((g) => g.grantId)).to.have.members([a.jti, b.jti]);
    expect(listed!.grants.every((g) => g.vaultId === budget.vaultId)).to.equal(true);
    expect(agents.map((x) => x.agentId)).to.not.include(idle.agentPrincipalId);
    // The operator's per-client agent lists only its own grants.
    const operator = agents.find((x) => x.agentId === operatorPrincipal)!;
    expect(operator.grants.map((g) => g.vaultId)).to.deep.equal([user.vaultId, user.vaultId]);
    await expectRefused(stack.clients.grants.getAgent({ sessionToken: session, agentId: idle.agentPrincipalId }), Reason.NOT_FOUND);

    const { agent } = await stack.clients.grants.getAgent({ sessionToken: session, agentId: budget.agentPrincipalId.toUpperCase() });
    expect(agent!.agentId).to.equal(budget.agentPrincipalId);
    expect(agent!.grants.map((g) => g.grantId)).to.have.members([a.jti, b.jti]);

    expect((await stack.clients.grants.revokeUserGrant({ sessionToken: session, grantId: a.jti })).revoked).to.equal(1);
    await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: a.accessToken }), Reason.INVALID_TOKEN);
    const refused = await rpc("/mcp/write", a.accessToken, "payments.initiate", payArgs(100));
    expect(refused.json!.error?.data?.reason_id, refused.text).to.equal("invalid_token");
    const after = (await stack.clients.grants.getAgent({ sessionToken: session, agentId: budget.agentPrincipalId })).agent!;
    expect(after.activeGrants).to.equal(1);
    expect(after.grants.find((g) => g.grantId === a.jti)!.state).to.equal("revoked");

    await stack.clients.grants.killSwitch({ sessionToken: session });
    await expectRefused(stack.clients.grants.verifyAgentToken({ accessToken: b.accessToken }), Reason.INVALID_TOKEN);
    const killed = (await stack.clients.grants.listAgents({ sessionToken: session })).agents.find((x) => x.agentId === budget.agentPrincipalId)!;
    expect(killed.activeGrants).to.equal(0);
  });

  it("a budget created through an OAuth client is named with that client", async () => {
    const user: Owner = await createUser(stack);
    const client = (await registerClient(stack, { client_name: "Planner app", scope: "agent:budget:create accounts:read payments:initiate" })).body;
    const jar = createJar(stack.url);
    const parent = await oauthToken(jar, user, client, user.vaultId, "agent:budget:create");
    const { budget } = await stack.clients.budgets.createBudget({ accessToken: parent.access_token, ...budgetParams({ displayName: "Groceries" }) });
    const child = await oauthToken(jar, user, client, budget!.vaultId, "accounts:read");
    expect(actOf(child.access_token)).to.equal(budget!.agentPrincipalId);
    const { agents } = await stack.clients.grants.listAgents({ sessionToken: await ownerSession(stack, user.userId) });
    const listed = agents.find((x) => x.agentId === budget!.agentPrincipalId)!;
    expect(listed.displayName).to.equal("Groceries (via Planner app)");
    expect(listed.clientId).to.equal(client.client_id);
    expect(listed.grants.map((g) => g.grantId)).to.deep.equal([child.jti]);
    // The client's own agent holds the parent grant only.
    const own = agents.find((x) => x.agentId === actOf(parent.access_token))!;
    expect(own.grants.map((g) => g.grantId)).to.deep.equal([jtiOf(parent.access_token)]);
  });

  it("hostile: user A can never get a grant acting as user B's budget, nor see it on the dashboard", async () => {
    const a: Owner = await createUser(stack);
    const { user: b, budget } = await ownerWithBudget();
    const bGrant = (await stack.admin.grants.issueGrant({ userId: b.userId, vaultId: budget.vaultId, scopes: ["accounts:read"] })).token!;

    // Operator IssueGrant for A on B's budget vault, in any spelling of the id.
    for (const vaultId of [budget.vaultId, budget.vaultId.toUpperCase()]) {
      const refused = await refusalOf(stack.admin.grants.issueGrant({ userId: a.userId, vaultId, scopes: ["accounts:read"] }));
      expect(refused.detail?.reason, vaultId).to.equal(Reason.INVALID_TARGET);
    }
    // Consent by A naming B's budget vault, as the resource or as the picked vault.
    const registered = await stack.clients.grants.registerClient({
      clientName: "Hostile",
      redirectUris: [REDIRECT],
      grantTypes: ["authorization_code", "refresh_token"],
      responseTypes: ["code"],
      tokenEndpointAuthMethod: "client_secret_post",
      scope: "accounts:read",
    });
    const aSession = await ownerSession(stack, a.userId, { stepUp: true });
    const request = (resources: string[]) => ({
      clientId: registered.client!.clientId,
      redirectUri: REDIRECT,
      scope: "accounts:read",
      resources,
      codeChallenge: pkce().challenge,
      codeChallengeMethod: "S256",
    });
    for (const [resources, vaultId] of [
      [[urn(budget.vaultId)], ""],
      [[], budget.vaultId],
    ] as const) {
      await expectRefused(
        stack.clients.grants.approveAuthorization({ request: request([...resources]), sessionToken: aSession, vaultId }),
        Reason.INVALID_TARGET,
      );
    }
    expect(await stack.core.db("grants").where({ user_id: a.userId })).to.have.length(0);
    expect(await stack.core.db("authorization_codes").where({ user_id: a.userId })).to.have.length(0);

    // A's dashboard neither lists nor opens B's budget principal, nor revokes B's grant.
    expect((await stack.clients.grants.listAgents({ sessionToken: aSession })).agents.map((x) => x.agentId)).to.not.include(budget.agentPrincipalId);
    await expectRefused(stack.clients.grants.getAgent({ sessionToken: aSession, agentId: budget.agentPrincipalId }), Reason.NOT_FOUND);
    await expectRefused(stack.clients.grants.revokeUserGrant({ sessionToken: aSession, grantId: bGrant.jti }), Reason.NOT_FOUND);
    await stack.clients.grants.killSwitch({ sessionToken: aSession });
    expect((await stack.clients.grants.verifyAgentToken({ accessToken: bGrant.accessToken })).grant!.agentPrincipalId).to.equal(budget.agentPrincipalId);
  });

  it("many concurrent grants and consents on a budget's vault and its parent each get the right principal (PostgreSQL)", async function () {
    requirePostgres(this, "needs concurrent transactions on separate connections");
    const { user, budget } = await ownerWithBudget();
    const registered = await stack.clients.grants.registerClient({
      clientName: "Concurrent",
      redirectUris: [REDIRECT],
      grantTypes: ["authorization_code", "refresh_token"],
      responseTypes: ["code"],
      tokenEndpointAuthMethod: "client_secret_post",
      scope: "accounts:read",
    });
    const clientId = registered.client!.clientId;
    const session = await ownerSession(stack, user.userId);
    const consent = async (vaultId: string) => {
      const { verifier, challenge } = pkce();
      const { code } = await stack.clients.grants.approveAuthorization({
        request: { clientId, redirectUri: REDIRECT, scope: "accounts:read", resources: [urn(vaultId)], codeChallenge: challenge, codeChallengeMethod: "S256" },
        sessionToken: session,
      });
      return (await stack.clients.grants.exchangeCode({ clientId, clientSecret: registered.clientSecret, code, redirectUri: REDIRECT, codeVerifier: verifier }))
        .token!.accessToken;
    };
    const issue = async (vaultId: string, withClient: boolean) =>
      (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId, scopes: ["accounts:read"], clientId: withClient ? clientId : "" })).token!
        .accessToken;
    const jobs: { vault: "budget" | "parent"; run: Promise<string> }[] = [];
    for (let i = 0; i < 12; i++) {
      for (const vault of ["budget", "parent"] as const) {
        const vaultId = vault === "budget" ? budget.vaultId : user.vaultId;
        jobs.push({ vault, run: consent(vaultId) }, { vault, run: issue(vaultId, i % 2 === 0) });
      }
    }
    const tokens = await Promise.all(jobs.map(async (j) => ({ vault: j.vault, token: await j.run })));
    const clientPrincipal = await perClientPrincipal(user.userId, clientId);
    const operatorPrincipal = await perClientPrincipal(user.userId, "");
    expect(await stack.core.db("oauth_agents").where({ user_id: user.userId })).to.have.length(2);
    for (const { vault, token } of tokens) {
      const act = actOf(token);
      const clientOf = decodeJwt(token).client_id;
      if (vault === "budget") expect(act).to.equal(budget.agentPrincipalId);
      else expect(act).to.equal(clientOf === clientId ? clientPrincipal : operatorPrincipal);
    }
  });
});
