import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, formFields, pkce, postForm, REDIRECT, registerClient, signIn, vaultUrn, type Jar } from "../../support/agent-oauth.js";
import { budgetParams, createOwner, grantFor, ownerSession, type TestOwner } from "../../support/budgets.js";
import { budgetUnderRoot } from "../../support/budget-life.js";
import { requirePostgres } from "../../support/db.js";

/**
 * The consent page (resource = the MCP server URL, the user picks the vault) offers no vault a
 * grant could never bind, and a decision naming one anyway goes back to the client as
 * invalid_target, like any other refused vault, instead of stranding the user on a page.
 */
describe("consent: closed and declined budgets' vaults", function () {
  this.timeout(120_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  /** A user with an open, a closed and a declined budget under their root vault. */
  async function ownerWithBudgets() {
    const owner = await createOwner(stack);
    await stack.admin.budgets.fundVault({ vaultId: owner.vaultId, amountCents: 1_000n });
    const stepped = await grantFor(stack, owner, { stepUp: true });
    const make = async (accessToken: string) =>
      (await stack.clients.budgets.createBudget({ accessToken, ...budgetParams({ stepUpAmountCents: undefined }) })).budget!;
    const open = await make(stepped);
    const closed = await make(stepped);
    await stack.clients.budgets.closeBudget({ accessToken: stepped, vaultId: closed.vaultId });
    // Without step-up the budget waits as a draft for the owner, who declines it.
    const declined = await make(await grantFor(stack, owner));
    await stack.clients.budgets.declineBudget({ sessionToken: await ownerSession(stack, owner.userId), agentPrincipalId: declined.agentPrincipalId });
    return { owner, open: open.vaultId, closed: closed.vaultId, declined: declined.vaultId };
  }

  const query = {
    response_type: "code",
    redirect_uri: REDIRECT,
    code_challenge: pkce().challenge,
    code_challenge_method: "S256",
    scope: "accounts:read",
    state: "pick",
  };

  /** The owner signed in over HTTP on the consent page of a new client; the page's form and offered vaults. */
  async function consentPage(owner: TestOwner) {
    const { email } = await stack.core.db("users").where({ id: owner.userId }).first("email");
    const client = (await registerClient(stack)).body;
    const jar = createJar(stack.url);
    await signIn(stack, jar, email);
    const { verifier, challenge } = pkce();
    const page = await jar.get(
      `/oauth2/authorize?${new URLSearchParams({ ...query, client_id: client.client_id, code_challenge: challenge, resource: stack.mcpUrl })}`,
    );
    const text = await page.text();
    expect(page.status, text.slice(0, 300)).to.equal(200);
    const offered = [...text.matchAll(/name="vault_id" value="([^"]+)"/g)].map((m) => m[1]!);
    return { client, jar, verifier, offered, text, fields: formFields(text, "/oauth2/authorize/decision") };
  }

  const decide = (jar: Jar, fields: Record<string, string | string[]>, vaultId: string) =>
    jar.post("/oauth2/authorize/decision", { ...fields, vault_id: vaultId, decision: "approve" });

  /** The redirect back to the client: its error (or "code"), state and iss. */
  function backToClient(res: Response) {
    expect(res.status, "a redirect to the client").to.equal(303);
    const loc = new URL(res.headers.get("location")!);
    expect(loc.origin + loc.pathname).to.equal(REDIRECT);
    expect([loc.searchParams.get("state"), loc.searchParams.get("iss")]).to.deep.equal(["pick", stack.url]);
    return loc;
  }

  const codesOn = async (vaultId: string) => (await stack.core.db("authorization_codes").where({ vault_id: vaultId })).length;

  it("the page offers the root vault and an open budget's vault, never a closed or declined budget's", async () => {
    const b = await ownerWithBudgets();
    const { offered, text } = await consentPage(b.owner);
    expect(offered).to.have.members([b.owner.vaultId, b.open]);
    // Each is named as its owner knows it: the budget by the name its agent gave it.
    expect(text)
      .to.include(`Main vault ${b.owner.vaultId.slice(0, 8)}`)
      .and.include(`Budget “\u2068Trip to Lisbon\u2069” ${b.open.slice(0, 8)}`);
  });

  it("hostile: a budget name an agent chose is shown as text, never as markup", async () => {
    const owner = await createOwner(stack);
    const accessToken = await grantFor(stack, owner, { stepUp: true });
    const name = `<img src=x onerror="alert(1)">`;
    await stack.clients.budgets.createBudget({ accessToken, ...budgetParams({ stepUpAmountCents: undefined, displayName: name }) });
    const { text } = await consentPage(owner);
    expect(text).to.not.include(name);
    expect(text).to.include("Budget “\u2068&lt;img src=x onerror=&quot;alert(1)&quot;&gt;\u2069”");
  });

  it("a decision naming a closed or declined budget's vault goes back to the client with invalid_target; no code is made", async () => {
    const b = await ownerWithBudgets();
    const { client, jar, fields } = await consentPage(b.owner);
    for (const [vaultId, why] of [
      [b.closed, "the vault belongs to a closed budget"],
      [b.declined.toUpperCase(), "the vault belongs to a budget its owner declined"],
    ] as const) {
      const back = backToClient(await decide(jar, fields, vaultId));
      expect([back.searchParams.get("error"), back.searchParams.get("error_description"), back.searchParams.get("code")]).to.deep.equal([
        "invalid_target",
        why,
        null,
      ]);
    }
    // Named as the resource, the vault is refused before any page is shown.
    const named = new URLSearchParams({ ...query, client_id: client.client_id, resource: vaultUrn(b.closed) });
    expect(backToClient(await jar.get(`/oauth2/authorize?${named}`)).searchParams.get("error")).to.equal("invalid_target");
    expect([await codesOn(b.closed), await codesOn(b.declined)]).to.deep.equal([0, 0]);
    // The page's own choice still works.
    expect(backToClient(await decide(jar, fields, b.open)).searchParams.get("code")).to.be.a("string");
  });

  it("a budget closed between the page and the click: Allow goes back to the client with invalid_target", async () => {
    const life = await budgetUnderRoot(stack);
    const { jar, fields, offered } = await consentPage(life.owner);
    expect(offered).to.include(life.child.vaultId);
    await stack.clients.budgets.closeBudget({ accessToken: life.parentToken, vaultId: life.child.vaultId });
    expect(backToClient(await decide(jar, fields, life.child.vaultId)).searchParams.get("error")).to.equal("invalid_target");
    expect(await codesOn(life.child.vaultId)).to.equal(0);
  });

  it("hostile: a decision naming another user's budget vault, open or closed, is refused with invalid_target and says nothing of its budget", async () => {
    const victim = await ownerWithBudgets();
    const attacker = await createOwner(stack);
    const { jar, fields } = await consentPage(attacker);
    for (const vaultId of [victim.open, victim.closed, victim.declined, victim.owner.vaultId]) {
      const back = backToClient(await decide(jar, fields, vaultId));
      expect([back.searchParams.get("error"), back.searchParams.get("error_description"), back.searchParams.get("code")]).to.deep.equal([
        "invalid_target",
        "choose one of your vaults",
        null,
      ]);
      expect(await codesOn(vaultId)).to.equal(0);
    }
  });

  it("a close racing many consent decisions on its vault: each goes back to the client, and no code it made mints a grant (PostgreSQL only)", async function () {
    requirePostgres(this, "racing transactions need several connections");
    for (let round = 0; round < 4; round++) {
      const life = await budgetUnderRoot(stack);
      const { client, jar, verifier, fields } = await consentPage(life.owner);
      const decisions: Promise<Response>[] = Array.from({ length: 30 }, () => decide(jar, fields, life.child.vaultId));
      const close = stack.clients.budgets.closeBudget({ accessToken: life.parentToken, vaultId: life.child.vaultId });
      const answers = await Promise.all(decisions);
      await close;
      const backs = answers.map(backToClient);
      const codes = backs.map((b) => b.searchParams.get("code")).filter((c): c is string => c !== null);
      for (const b of backs) if (!b.searchParams.get("code")) expect(b.searchParams.get("error")).to.equal("invalid_target");
      // Every code answered is one stored, and none made after the close: a later decision is refused.
      expect(await codesOn(life.child.vaultId)).to.equal(codes.length);
      expect(backToClient(await decide(jar, fields, life.child.vaultId)).searchParams.get("error")).to.equal("invalid_target");
      // A code approved before the close cannot be exchanged after it.
      for (const code of codes) {
        const token = await postForm(`${stack.url}/oauth2/token`, {
          grant_type: "authorization_code",
          code,
          redirect_uri: REDIRECT,
          code_verifier: verifier,
          client_id: client.client_id,
          client_secret: client.client_secret,
        });
        expect([token.status, token.body.error]).to.deep.equal([400, "invalid_grant"]);
      }
      expect(await stack.core.db("grants").where({ vault_id: life.child.vaultId, state: "active" })).to.deep.equal([]);
    }
  });
});
