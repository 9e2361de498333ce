import { expect } from "chai";
import fc from "fast-check";
import { createJar, createUser, signIn, stepUp, type Jar } from "../../support/agent-oauth.js";
import { ALL_AGENT_SCOPES } from "../../support/budgets.js";
import { postRpc } from "../../support/mcp.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { FUZZ, wellFormed } from "../../support/fuzz.js";

/** The pages' forms and passkey ceremonies, posted with hostile fields by a signed-in owner and a stranger. */
describe("hostile form posts from a signed-in, stepped-up owner: never a 5xx", function () {
  this.timeout(600_000);
  const { runs: RUNS, seed: SEED } = FUZZ;
  let stack: TestStack;
  let jar: Jar;
  let agentId: string;

  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, signinMethods: ["email", "passkey"], scrypt: { N: 1024, r: 8, p: 1 } });
    const user = await createUser(stack);
    await stack.admin.budgets.fundVault({ vaultId: user.vaultId, amountCents: 100_000n });
    const ownerToken = (await stack.admin.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: ALL_AGENT_SCOPES, stepUp: true })).token!
      .accessToken;
    const created = await postRpc(
      `${stack.url}/mcp/treasury`,
      {
        jsonrpc: "2.0",
        id: 1,
        method: "agent.budget.create",
        params: { purpose: "trip", display_name: "Fuzz", chain_allowlist: ["base"], idempotency_key: "fuzz-budget-1" },
      },
      { authorization: `Bearer ${ownerToken}` },
    );
    agentId = created.json!.result.agent_principal_id as string;
    jar = createJar(stack.url);
    await signIn(stack, jar, user.email, "/dashboard/money");
    expect((await stepUp(stack, jar, user.email, `/stepup?return_to=${encodeURIComponent("/dashboard/money")}`)).status).to.equal(303);
  });
  after(async () => {
    await stack?.close();
  });

  /** Every form a page posts, with the names of all its fields and the values it was rendered with. */
  const formsOf = (html: string) =>
    [...html.matchAll(/<form\b([^>]*)>([\s\S]*?)<\/form>/g)].flatMap(([, attrs, body]) => {
      const action = /action="([^"]+)"/.exec(attrs!)?.[1];
      if (!action || !/method="post"/i.test(attrs!)) return [];
      const fields: Record<string, string> = {};
      for (const m of body!.matchAll(/<(?:input|select|textarea)\b[^>]*name="([^"]+)"[^>]*>/g)) fields[m[1]!] = /value="([^"]*)"/.exec(m[0])?.[1] ?? "";
      return [{ action: action.replace(/&amp;/g, "&"), fields }];
    });

  it("every form on the owner's pages, with fields dropped, replaced or repeated", async () => {
    const pages = ["/dashboard/agents", "/dashboard/money", `/dashboard/agents/${agentId}`, "/dashboard/passkeys"];
    const forms = [];
    // Signing out would leave every later post unauthenticated, refused before it reached anything.
    for (const p of pages) forms.push(...formsOf(await (await jar.get(p)).text()).filter((f) => f.action !== "/signout"));
    expect(forms.length).to.be.greaterThan(3);
    const value = fc.oneof(fc.string({ maxLength: 30 }), fc.constantFrom("", "0", "-1", "1e309", "9007199254740993", "12.345", "\u0000", "a".repeat(3000)));
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...forms), fc.func(fc.constantFrom("keep", "drop", "replace", "repeat")), value, async (form, choose, replacement) => {
        const body: Record<string, string | string[]> = {};
        for (const [name, v] of Object.entries(form.fields)) {
          const what = choose(name);
          if (what === "keep") body[name] = v;
          else if (what === "replace") body[name] = wellFormed(replacement);
          else if (what === "repeat") body[name] = [v, wellFormed(replacement)];
        }
        const r = await jar.post(form.action, body);
        expect(r.status, `${form.action} ${JSON.stringify(body).slice(0, 300)}: ${(await r.text()).slice(0, 300)}`).to.be.below(500);
      }),
      { numRuns: RUNS * 3, seed: SEED },
    );
    const errors = stack.logs.lines.filter((l) => JSON.parse(l).level >= 50);
    expect(errors).to.deep.equal([]);
  });

  it("passkey ceremonies (signing in, adding one) answered with hostile WebAuthn responses", async () => {
    const b64 = fc.oneof(
      fc.base64String({ maxLength: 200 }).map((x) => x.replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "")),
      fc.string({ maxLength: 20 }),
    );
    const clientData = fc
      .record(
        { type: fc.constantFrom("webauthn.get", "webauthn.create", "x"), challenge: b64, origin: fc.constantFrom(stack.url, "http://evil.test", "") },
        { requiredKeys: [] },
      )
      .map((c) => Buffer.from(JSON.stringify(c)).toString("base64url"));
    const field = fc.oneof(b64, clientData, fc.jsonValue({ maxDepth: 2 }));
    const response = fc.record(
      {
        id: b64,
        rawId: b64,
        type: fc.constantFrom("public-key", "x", ""),
        response: fc.record(
          {
            clientDataJSON: field,
            authenticatorData: field,
            signature: field,
            userHandle: field,
            attestationObject: field,
            transports: fc.jsonValue({ maxDepth: 1 }),
          },
          { requiredKeys: [] },
        ),
        clientExtensionResults: fc.jsonValue({ maxDepth: 2 }),
        authenticatorAttachment: fc.constantFrom("platform", "cross-platform", 7),
      },
      { requiredKeys: [] },
    );
    const anonymous = createJar(stack.url);
    const ceremonies: [Jar, string, string][] = [
      [anonymous, "/signin/passkey", "/signin/passkey"],
      [jar, "/dashboard/passkeys/add", "/dashboard/passkeys/add"],
    ];
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...ceremonies),
        fc.oneof(
          response.map((r) => JSON.stringify(r)),
          fc.string({ maxLength: 100 }),
        ),
        async ([who, page, action], answer) => {
          const started = await who.get(page);
          const html = await started.text();
          expect(started.status, `${page}: ${html.slice(0, 300)}`).to.be.below(500);
          const form = formsOf(html).find((f) => f.action.startsWith(action));
          expect(form, `${page}: ${html.slice(0, 300)}`).to.not.equal(undefined);
          if (!form) return;
          const r = await who.post(form.action, { ...form.fields, response: wellFormed(answer) });
          expect(r.status, `${action} ${answer.slice(0, 300)}: ${(await r.text()).slice(0, 300)}`).to.be.below(500);
        },
      ),
      { numRuns: RUNS * 2, seed: SEED },
    );
    expect(stack.logs.lines.filter((l) => JSON.parse(l).level >= 50)).to.deep.equal([]);
  });
});
