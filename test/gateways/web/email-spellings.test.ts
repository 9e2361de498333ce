import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, signIn } from "../../support/agent-oauth.js";
import { up as canonicalEmailsMigration } from "../../../core/db/migrations/0044-canonical-emails.js";
import { requirePostgres } from "../../support/db.js";
import { createPartner, mintPartnerToken } from "../../support/partners.js";

/** An address has one account however it is spelled: letter case, NFC or NFD, Unicode or ACE (xn--) domain. */
describe("e-mail spellings reach one account", function () {
  this.timeout(60_000);
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack?.close());

  const tag = () => randomBytes(4).toString("hex");

  it("signs in to the account made with the ACE domain when the address is typed in NFD Unicode upper case", async () => {
    const local = `e\u0301mile-${tag()}`;
    const created = await stack.admin.partners.createUser({ email: `${local}@xn--bcher-kva.example` });
    const canonical = `${local.normalize("NFC")}@b\u00fccher.example`;
    const jar = createJar(stack.url);
    await signIn(stack, jar, `${local.toUpperCase()}@BU\u0308CHER.EXAMPLE`);
    const page = await (await jar.get("/dashboard/agents")).text();
    expect(page).to.include(`Signed in as ${canonical}`);
    const rows = await stack.core.db("users").where({ email: canonical }).select("id");
    expect(rows.map((r) => r.id)).to.deep.equal([created.userId]);
  });

  it("the upgrade puts stored addresses in that spelling, and leaves a row alone whose spelling another account holds", async () => {
    const [a, b, c] = [tag(), tag(), tag()];
    const at = new Date();
    const row = (email: string) => ({ id: crypto.randomUUID(), email, status: "active", created_at: at });
    const rows = [
      row(`e\u0301-${a}@xn--bcher-kva.example`),
      row(`held-${b}@b\u00fccher.example`),
      row(`held-${b}@xn--bcher-kva.example`),
      row(`ascii-${c}@example.com`),
    ];
    await stack.core.db("users").insert(rows);
    await canonicalEmailsMigration(stack.core.db);
    const emails = await stack.core
      .db("users")
      .whereIn(
        "id",
        rows.map((r) => r.id),
      )
      .select("id", "email");
    const byId = new Map(emails.map((r) => [r.id as string, r.email as string]));
    expect(rows.map((r) => byId.get(r.id))).to.deep.equal([
      `\u00e9-${a}@b\u00fccher.example`,
      `held-${b}@b\u00fccher.example`,
      `held-${b}@xn--bcher-kva.example`,
      `ascii-${c}@example.com`,
    ]);
  });

  it("twelve partners' pre-creates of one address in as many spellings at once make one account", async function () {
    requirePostgres(this, "concurrent creates need several connections");
    const local = `race-e\u0301-${tag()}`;
    const spellings = [`${local}@xn--bcher-kva.example`, `${local.toUpperCase()}@BU\u0308CHER.EXAMPLE`, `${local.normalize("NFC")}@b\u00fccher.example`];
    const tokens: string[] = [];
    for (let i = 0; i < 12; i++) tokens.push(await mintPartnerToken(stack, await createPartner(stack)));
    const answers = await Promise.all(
      tokens.map(async (t, i) => {
        const res = await fetch(`${stack.url}/api/partner/users`, {
          method: "POST",
          headers: { authorization: `Bearer ${t}`, "content-type": "application/json" },
          body: JSON.stringify({ email: spellings[i % spellings.length] }),
        });
        expect(res.status, await res.clone().text()).to.be.oneOf([200, 201]);
        return ((await res.json()) as { user_id: string }).user_id;
      }),
    );
    const canonical = `${local.normalize("NFC")}@b\u00fccher.example`;
    const rows = await stack.core.db("users").where({ email: canonical }).select("id");
    expect(rows).to.have.length(1);
    expect(new Set(answers)).to.deep.equal(new Set([rows[0].id]));
  });
});
