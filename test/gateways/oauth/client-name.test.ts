import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, pkce, REDIRECT, registerClient, signIn } from "../../support/agent-oauth.js";
import { budgetParams, createOwner, grantFor } from "../../support/budgets.js";
import { FINE_NAMES, SPOOFING_NAMES } from "../../support/names.js";
import { expectOAuthError } from "../../support/refusals.js";

/** The name a registration gives its client is shown on the consent page: it must read as it is stored. */
describe("POST /oauth2/register: client_name text rules", function () {
  this.timeout(120_000);
  let stack: TestStack;
  before(async () => {
    // Room for the burst below: shedding registrations has its own test.
    stack = await startStack({
      gateway: true,
      publicUrls: true,
      scrypt: { N: 1024, r: 8, p: 1 },
      secretChecks: { maxPerFlow: 64, maxQueue: 128, maxWaitMs: 60_000 },
    });
  });
  after(() => stack.close());

  const register = (client_name: string) =>
    fetch(`${stack.url}/oauth2/register`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ client_name, redirect_uris: [REDIRECT], scope: "accounts:read" }),
    });
  const stored = async (name: string) => (await stack.core.db("oauth_clients").where({ client_name: name }).select("client_id")).length;

  /** The consent page an owner signed in over HTTP sees for a client. */
  async function consentText(clientId: string, owner?: Awaited<ReturnType<typeof createOwner>>) {
    const who = owner ?? (await createOwner(stack));
    const { email } = await stack.core.db("users").where({ id: who.userId }).first("email");
    const jar = createJar(stack.url);
    await signIn(stack, jar, email);
    const query = { response_type: "code", client_id: clientId, redirect_uri: REDIRECT, code_challenge: pkce().challenge };
    const page = await jar.get(
      `/oauth2/authorize?${new URLSearchParams({ ...query, code_challenge_method: "S256", scope: "accounts:read", state: "s", resource: stack.mcpUrl })}`,
    );
    const text = await page.text();
    expect(page.status, text.slice(0, 300)).to.equal(200);
    return text;
  }

  it("a name with bidi controls or line separators is 400 invalid_client_metadata naming client_name, and no client is made", async () => {
    for (const [name] of SPOOFING_NAMES) {
      const res = await register(name);
      const body = await expectOAuthError(res, 400, "invalid_client_metadata");
      expect(body.error_description, JSON.stringify(name)).to.match(/^client_name must not contain line or paragraph separators or bidirectional controls/);
      expect(await stored(name), JSON.stringify(name)).to.equal(0);
      expect(await stored(name.trim()), JSON.stringify(name)).to.equal(0);
    }
  });

  it("names in any script, right-to-left ones and emoji with joiners, are registered as sent (trimmed) and shown isolated on the consent page", async () => {
    for (const name of FINE_NAMES) {
      const res = await register(name);
      const body = (await res.json()) as { client_id: string; client_name: string };
      expect(res.status, JSON.stringify(body)).to.equal(201);
      expect(body.client_name).to.equal(name.trim());
      expect(await consentText(body.client_id)).to.include(`<strong>\u2068${name.trim()}\u2069</strong>`);
    }
  });

  it("names stored before the rule still show: a client's and a budget's, isolated so they reorder nothing around them", async () => {
    const client = (await registerClient(stack)).body;
    const spoof = "Trusted \u202eliveE";
    await stack.core.db("oauth_clients").where({ client_id: client.client_id }).update({ client_name: spoof });
    const owner = await createOwner(stack);
    const budget = (
      await stack.clients.budgets.createBudget({
        accessToken: await grantFor(stack, owner, { stepUp: true }),
        ...budgetParams({ stepUpAmountCents: undefined }),
      })
    ).budget!;
    await stack.core.db("agent_principals").where({ id: budget.agentPrincipalId }).update({ display_name: "Old \u202etrip" });
    const text = await consentText(client.client_id, owner);
    expect(text).to.include(`<strong>\u2068${spoof}\u2069</strong>`);
    expect(text).to.include(`Budget “\u2068Old \u202etrip\u2069” ${budget.vaultId.slice(0, 8)}`);
  });

  it("hostile: 40 registrations at once, half spelled to spoof, make exactly the honest half", async () => {
    const tag = `c${Date.now().toString(36)}`;
    const names = Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? `${tag} agent ${i}` : `${tag} \u202e${i} tnega`));
    const results = await Promise.all(names.map(async (n) => ({ n, res: await register(n) })));
    for (const { n, res } of results) {
      if (n.includes("\u202e")) await expectOAuthError(res, 400, "invalid_client_metadata");
      else expect(res.status, n).to.equal(201);
    }
    const made = await stack.core.db("oauth_clients").where("client_name", "like", `${tag} %`).pluck("client_name");
    expect(made.sort()).to.deep.equal(names.filter((n) => !n.includes("\u202e")).sort());
  });
});
