import { randomBytes } from "node:crypto";
import { Code, type ConnectError, createClient, type Interceptor } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { expect } from "chai";
import { groupCommitBatchSize, rpcDuration } from "../../core/observability/metrics.js";
import { GrantsService } from "../../gen/vaultgate/grants/v1/grants_pb.js";
import { PartnersService, PartnerStatus } from "../../gen/vaultgate/partners/v1/partners_pb.js";
import { PartnerResourcesService } from "../../gen/vaultgate/partners/v1/resources_pb.js";
import { pkce } from "../support/agent-oauth.js";
import { createOwner, grantFor, ownerSession } from "../support/budgets.js";
import { grpcCoreSuite } from "../support/grpc-core.js";
import { createPartner } from "../support/partners.js";
import { createUserFor } from "../support/resources.js";
import { doneThoughLeft, holdPool, leftInThePool } from "../support/db-holds.js";
import { countOf } from "../support/metrics.js";
import { thrownBy } from "../support/refusals.js";
import { uniqueSlug } from "../support/stack.js";
import { until } from "../support/until.js";

/** The caller's deadline: it passes while the call still waits for a database connection. */
const DEADLINE_MS = 300;
/** Signing-key states kept this long: however slowly the pool is held, no key-state reread waits behind it. */
const KEY_STATES_KEPT_MS = 60_000;
const REDIRECT = "http://127.0.0.1:9/callback";
const GRANTS = "vaultgate.grants.v1.GrantsService";
const PARTNERS = "vaultgate.partners.v1.PartnersService";
const RESOURCES = "vaultgate.partners.v1.PartnerResourcesService";

/**
 * Grant and partner writes that create or grant something: a call whose deadline passes while it waits
 * for a database connection is answered DEADLINE_EXCEEDED and, once a connection frees up, writes
 * nothing (no row, no audit row); the same call with time to run then succeeds once.
 */
describe("a deadline that passes while a grant or partner write waits for a database connection (core on its real port)", function () {
  this.timeout(120_000);
  const suite = grpcCoreSuite({ scrypt: { N: 1024, r: 8, p: 1 }, keyStateTtlMs: KEY_STATES_KEPT_MS });

  const operator: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${suite.stack.adminToken}`);
    return next(req);
  };
  const transport = (interceptors: Interceptor[] = []) => createGrpcTransport({ baseUrl: suite.core.server.url, interceptors });
  const grants = () => createClient(GrantsService, transport());
  const partners = () => createClient(PartnersService, transport([operator]));
  const resources = (asOperator = true) => createClient(PartnerResourcesService, transport(asOperator ? [operator] : []));
  const db = () => suite.stack.core.db;
  const left = (service: string, method: string, call: () => Promise<unknown>) => leftInThePool(db(), DEADLINE_MS, service, method, call);
  const count = async (table: string, where: Record<string, unknown>) => (await db()(table).where(where)).length;
  const audits = (action: string, subject?: string) => count("audit_records", { action, ...(subject === undefined ? {} : { subject }) });
  const deadline = { timeoutMs: DEADLINE_MS };

  it("IssueGrant: no grant, no principal, no audit row; then one grant", async () => {
    const owner = await createOwner(suite.stack);
    const issue = (options = {}) =>
      createClient(GrantsService, transport([operator])).issueGrant({ userId: owner.userId, vaultId: owner.vaultId, scopes: ["accounts:read"] }, options);
    const before = { audits: await audits("grant.issue"), principals: await count("agent_principals", { user_id: owner.userId }) };
    await left(GRANTS, "IssueGrant", () => issue(deadline));
    expect(await count("grants", { user_id: owner.userId })).to.equal(0);
    expect(await count("agent_principals", { user_id: owner.userId })).to.equal(before.principals);
    expect(await audits("grant.issue")).to.equal(before.audits);
    await issue();
    expect(await count("grants", { user_id: owner.userId })).to.equal(1);
    expect(await audits("grant.issue")).to.equal(before.audits + 1);
  });

  it("SupersedeGrant: the grant stays active, no successor, no audit row; then one successor", async () => {
    const owner = await createOwner(suite.stack);
    const accessToken = await grantFor(suite.stack, owner);
    const supersede = (options = {}) => grants().supersedeGrant({ accessToken, scope: "accounts:read" }, options);
    const issued = () => audits("agent.grant.issue");
    const before = await issued();
    await left(GRANTS, "SupersedeGrant", () => supersede(deadline));
    expect((await db()("grants").where({ user_id: owner.userId })).map((g) => g.state)).to.deep.equal(["active"]);
    expect(await issued()).to.equal(before);
    await supersede();
    expect(await count("grants", { user_id: owner.userId, state: "active" })).to.equal(1);
    expect(await count("grants", { user_id: owner.userId, state: "superseded" })).to.equal(1);
    expect(await issued()).to.equal(before + 1);
  });

  it("ApproveAuthorization (the consent): no code, no audit row; then one code", async () => {
    const owner = await createOwner(suite.stack);
    const { client, clientSecret } = await grants().registerClient({
      clientName: "Deadline agent",
      redirectUris: [REDIRECT],
      grantTypes: ["authorization_code", "refresh_token"],
      responseTypes: ["code"],
      tokenEndpointAuthMethod: "client_secret_post",
      scope: "accounts:read",
    });
    expect(clientSecret).to.not.equal("");
    const sessionToken = await ownerSession(suite.stack, owner.userId);
    const request = {
      clientId: client!.clientId,
      redirectUri: REDIRECT,
      scope: "accounts:read",
      resources: [`urn:vaultgate:vault:${owner.vaultId}`],
      codeChallenge: pkce().challenge,
      codeChallengeMethod: "S256",
    };
    const approve = (options = {}) => grants().approveAuthorization({ request, sessionToken }, options);
    await left(GRANTS, "ApproveAuthorization", () => approve(deadline));
    expect(await count("authorization_codes", { user_id: owner.userId })).to.equal(0);
    expect(await audits("oauth.consent", client!.clientId)).to.equal(0);
    await approve();
    expect(await count("authorization_codes", { user_id: owner.userId })).to.equal(1);
    expect(await audits("oauth.consent", client!.clientId)).to.equal(1);
  });

  it("VerifyAgentToken: a verify whose deadline passes in the grant_with_user queue leaves it at once; the others are answered", async () => {
    const owners = [await createOwner(suite.stack), await createOwner(suite.stack), await createOwner(suite.stack)];
    const tokens = await Promise.all(owners.map((o) => grantFor(suite.stack, o)));
    const verify = (n: number, options = {}) => grants().verifyAgentToken({ accessToken: tokens[n]! }, options);
    const batches = () => countOf(groupCommitBatchSize, { batcher: "grant_with_user" });
    const finished = () => countOf(rpcDuration, { service: GRANTS, method: "VerifyAgentToken" });
    // Each answered once first: the key states are then fresh, so a verify's one read is its grant's.
    for (const n of [0, 1, 2]) await verify(n);
    // With every connection held, the queue's two batches wait for one; a third verify waits behind them.
    const pool = await holdPool(db());
    let patient: Promise<{ grant?: { userId: string } }[]>;
    try {
      const before = await batches();
      const first = verify(0);
      await until("the first batch is taken", async () => (await batches()) >= before + 1);
      const second = verify(1);
      await until("the second batch is taken", async () => (await batches()) >= before + 2);
      patient = Promise.all([first, second]);
      const finishedBefore = await finished();
      const err = (await thrownBy(verify(2, deadline))) as ConnectError;
      expect(Code[err.code], err.rawMessage).to.equal("DeadlineExceeded");
      await until("core answered the late verify from its queue", async () => (await finished()) === finishedBefore + 1);
      expect(await batches(), "no batch took the late verify").to.equal(before + 2);
    } finally {
      await pool.release();
    }
    expect((await patient).map((a) => a.grant?.userId)).to.deep.equal([owners[0]!.userId, owners[1]!.userId]);
  });

  it("CreateUser: no user, no vault, no audit row; then one user", async () => {
    const email = `dl-${randomBytes(6).toString("hex")}@example.test`;
    const create = (options = {}) => partners().createUser({ email }, options);
    const before = await audits("user.create");
    await left(PARTNERS, "CreateUser", () => create(deadline));
    expect(await count("users", { email })).to.equal(0);
    expect(await audits("user.create")).to.equal(before);
    const { userId, vaultId } = await create();
    expect(await count("users", { email })).to.equal(1);
    expect(await count("vaults", { id: vaultId })).to.equal(1);
    expect(await audits("user.create", userId)).to.equal(1);
  });

  it("PreCreateUser (a partner): no user, no receipt, no audit row (not even a refusal); then one user", async () => {
    const partner = await createPartner(suite.stack);
    const { accessToken } = await suite.stack.clients.partners.issueToken({ clientId: partner.clientId, clientSecret: partner.clientSecret });
    const email = `dl-${randomBytes(6).toString("hex")}@example.test`;
    const create = (options = {}) => resources(false).preCreateUser({ accessToken, email }, options);
    const audited = () => count("audit_records", { actor: `partner:${partner.clientId}`, action: "partner.users.create" });
    // Key states fresh: the access checks' batch is then the call's first wait,
    // and it is taken at once, so the call reaches its transaction once the pool is free.
    await resources(false).authorizePartner({ accessToken });
    await left(RESOURCES, "PreCreateUser", () => create(deadline));
    expect(await count("users", { email })).to.equal(0);
    expect(await count("partner_users", { partner_id: partner.partnerId })).to.equal(0);
    expect(await audited(), "neither a success nor a failure is recorded").to.equal(0);
    expect(await create()).to.include({ created: true });
    expect(await count("users", { email })).to.equal(1);
    expect(await count("partner_users", { partner_id: partner.partnerId })).to.equal(1);
    expect(await audited()).to.equal(1);
  });

  /** An operator change that creates or grants: `written` counts its rows and audit rows. */
  interface Change {
    title: string;
    service: string;
    method: string;
    setup: () => Promise<{ call: (options: object) => Promise<unknown>; written: () => Promise<{ rows: number; audits: number }> }>;
  }
  const changes: Change[] = [
    {
      title: "CreatePartner: no partner",
      service: PARTNERS,
      method: "CreatePartner",
      setup: async () => {
        const slug = uniqueSlug();
        const call = (options: object) => partners().createPartner({ name: `Deadline ${slug}`, slug }, options);
        return {
          call,
          written: async () => ({
            rows: await count("partners", { slug }),
            audits: (await db()("audit_records").where({ action: "partner.create" }).whereLike("subject", `gpc_${slug}_%`)).length,
          }),
        };
      },
    },
    {
      title: "GrantConsent: no consent",
      service: RESOURCES,
      method: "GrantConsent",
      setup: async () => {
        const partner = await createPartner(suite.stack);
        const { userId } = await createUserFor(suite.stack);
        const call = (options: object) => resources().grantConsent({ clientId: partner.clientId, userId, scopes: { scopes: ["kyc:read"] } }, options);
        return {
          call,
          written: async () => ({
            rows: await count("consents", { partner_id: partner.partnerId }),
            audits: await audits("consent.grant", `${partner.clientId}:${userId}`),
          }),
        };
      },
    },
    {
      title: "AddWallet: no wallet",
      service: RESOURCES,
      method: "AddWallet",
      setup: async () => {
        const { userId } = await createUserFor(suite.stack);
        const call = (options: object) => resources().addWallet({ userId, chain: "eth", address: `0x${randomBytes(20).toString("hex")}` }, options);
        return { call, written: async () => ({ rows: await count("user_wallets", { user_id: userId }), audits: await audits("user.add_wallet", userId) }) };
      },
    },
    {
      title: "ProvisionUsAccount: no account",
      service: RESOURCES,
      method: "ProvisionUsAccount",
      setup: async () => {
        const { userId } = await createUserFor(suite.stack);
        const call = (options: object) => resources().provisionUsAccount({ userId }, options);
        return {
          call,
          written: async () => ({ rows: await count("us_accounts", { user_id: userId }), audits: await audits("user.provision_us_account", userId) }),
        };
      },
    },
    {
      title: "RecordLedgerEntry: no entry",
      service: RESOURCES,
      method: "RecordLedgerEntry",
      setup: async () => {
        const { userId } = await createUserFor(suite.stack);
        const call = (options: object) => resources().recordLedgerEntry({ userId, direction: "credit", amountCents: 500n }, options);
        return { call, written: async () => ({ rows: await count("ledger_entries", { user_id: userId }), audits: await audits("ledger.record", userId) }) };
      },
    },
    {
      title: "SetUserStatus active (a reactivation): the user stays inactive",
      service: RESOURCES,
      method: "SetUserStatus",
      setup: async () => {
        const { userId } = await createUserFor(suite.stack);
        await suite.stack.admin.partnerResources.setUserStatus({ userId, status: "inactive" });
        const call = (options: object) => resources().setUserStatus({ userId, status: "active" }, options);
        return {
          call,
          written: async () => ({ rows: await count("users", { id: userId, status: "active" }), audits: await audits("user.set_status.active", userId) }),
        };
      },
    },
    {
      title: "SetPartnerStatus active (an activation): the partner stays pending",
      service: PARTNERS,
      method: "SetPartnerStatus",
      setup: async () => {
        const { partnerId, clientId } = await createPartner(suite.stack, { status: "pending" });
        const call = (options: object) => partners().setPartnerStatus({ clientId, status: PartnerStatus.ACTIVE }, options);
        return {
          call,
          written: async () => ({
            rows: await count("partners", { id: partnerId, status: "active" }),
            audits: await audits("partner.set_status.active", clientId),
          }),
        };
      },
    },
  ];
  for (const c of changes) {
    it(`${c.title}, no audit row; then done once`, async () => {
      const { call, written } = await c.setup();
      await left(c.service, c.method, () => call(deadline));
      expect(await written()).to.deep.equal({ rows: 0, audits: 0 });
      await call({});
      expect(await written()).to.deep.equal({ rows: 1, audits: 1 });
    });
  }

  it("SetPartnerStatus suspended (it ends access): done though its caller left while it waited", async () => {
    const { partnerId, clientId } = await createPartner(suite.stack);
    const suspended = async () => (await db()("partners").where({ id: partnerId }).first()).status === "suspended";
    await doneThoughLeft(db(), DEADLINE_MS, () => partners().setPartnerStatus({ clientId, status: PartnerStatus.SUSPENDED }, deadline), suspended);
    expect(await audits("partner.set_status.suspended", clientId)).to.equal(1);
  });
});
