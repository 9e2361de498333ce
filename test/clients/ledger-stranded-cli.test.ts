import { expect } from "chai";
import { cliCoreSuite } from "../support/cli-core.js";
import { inProcess } from "../support/cli-in-process.js";
import { runCli } from "../support/process.js";
import { closeAfterEveryoneElse, strandTogether } from "../support/stranded.js";

/**
 * `vaultgate ledger stranded` against core on a real port: a page of closed budgets' vaults still
 * holding money and its next_cursor. The database is shared: only this file's vaults are compared.
 */
describe("vaultgate ledger stranded", function () {
  this.timeout(120_000);
  const suite = cliCoreSuite({ webhookPollMs: 0, provisioningLimitPerMinute: 1000 });
  before(() => closeAfterEveryoneElse(suite.stack));

  /** The cursor whose next page starts at `vaultId`: walking the list one vault at a time (in process, cheap). */
  async function cursorBefore(vaultId: string): Promise<string> {
    let cursor = "";
    for (;;) {
      const res = await suite.stack.admin.budgets.listStrandedFunds({ limit: 1, cursor });
      expect(res.nextCursor, `${vaultId} is listed`).to.not.equal("");
      if (res.vaults[0]!.vaultId === vaultId) return cursor;
      cursor = res.nextCursor;
    }
  }

  it("prints one page and its next_cursor; --cursor prints the next page, --all every page once", async () => {
    const mine = await strandTogether(suite.stack, 3);
    const owner = await suite.stack.core.db("budgets").where({ vault_id: mine[1] }).first("parent_vault_id", "user_id", "closed_at");

    const second = await runCli(["ledger", "stranded", "--limit", "1", "--cursor", await cursorBefore(mine[1]!)], suite.env);
    expect(second.code, second.stderr).to.equal(0);
    expect(Object.keys(second.json!).sort()).to.deep.equal(["next_cursor", "vaults"]);
    expect(second.json!.vaults).to.deep.equal([
      {
        vault_id: mine[1],
        parent_vault_id: owner.parent_vault_id,
        user_id: owner.user_id,
        balance_cents: 100,
        currency: "USD",
        closed_at: new Date(owner.closed_at).toISOString(),
      },
    ]);
    expect(second.json!.next_cursor).to.be.a("string");
    const third = await runCli(["ledger", "stranded", "--limit", "1", "--cursor", second.json!.next_cursor as string], suite.env);
    expect(third.code, third.stderr).to.equal(0);
    expect((third.json!.vaults as { vault_id: string }[]).map((v) => v.vault_id)).to.deep.equal([mine[2]]);

    const all = await runCli(["ledger", "stranded", "--all", "--limit", "2"], suite.env);
    expect(all.code, all.stderr).to.equal(0);
    expect(all.json!.next_cursor).to.equal(null);
    const ids = (all.json!.vaults as { vault_id: string }[]).map((v) => v.vault_id);
    expect(ids.filter((v) => mine.includes(v))).to.deep.equal(mine);
    expect(new Set(ids).size, "no vault twice").to.equal(ids.length);
  });

  it("refuses a tampered cursor (exit 1, invalid_cursor) and a limit above 100 (usage, exit 2) without output", async () => {
    await strandTogether(suite.stack, 2);
    const page = await runCli(["ledger", "stranded", "--limit", "1"], suite.env);
    const cursor = page.json!.next_cursor as string;
    const tampered = `${cursor.slice(0, -1)}${cursor.endsWith("A") ? "B" : "A"}`;
    const refused = await runCli(["ledger", "stranded", "--cursor", tampered], suite.env);
    expect([refused.code, refused.stdout]).to.deep.equal([1, ""]);
    expect(refused.stderr).to.equal("vaultgate: cursor is malformed or not a next_cursor of this list (invalid_cursor)\n");
    const big = await runCli(["ledger", "stranded", "--limit", "101"], suite.env);
    expect([big.code, big.stdout]).to.deep.equal([2, ""]);
    expect(big.stderr).to.include("--limit must be an integer from 1 to 100");
  });

  it("ledger verify keeps the first 100 as findings; with more_findings, ledger stranded --cursor lists the rest", async () => {
    let listed = 0;
    for (let cursor = ""; ; ) {
      const res = await suite.stack.admin.budgets.listStrandedFunds({ cursor });
      listed += res.vaults.length;
      cursor = res.nextCursor;
      if (!cursor) break;
    }
    const mine: string[] = [];
    // Enough that this file's vaults run past the first 100, wherever the shared database stands.
    for (let left = Math.max(2, 102 - listed); left > 0; left -= 50) mine.push(...(await strandTogether(suite.stack, Math.min(left, 50))));

    const verify = await runCli(["ledger", "verify", "--json"], suite.env);
    expect(verify.code, verify.stderr).to.equal(0);
    expect(verify.json).to.include({ ok: true, more_findings: true });
    const findings = (verify.json!.findings as { check: string; vault_id: string }[]).map((f) => f.vault_id);
    expect(findings).to.have.length(100);
    const rest = await runCli(["ledger", "stranded", "--all", "--cursor", verify.json!.more_findings_cursor as string], suite.env);
    expect(rest.code, rest.stderr).to.equal(0);
    const ids = [...findings, ...(rest.json!.vaults as { vault_id: string }[]).map((v) => v.vault_id)];
    expect(ids.filter((v) => mine.includes(v))).to.deep.equal(mine);
    expect(new Set(ids).size, "no vault twice").to.equal(ids.length);
  });

  it("prints a table and the next_cursor on a terminal, the same page as JSON with --json (in process)", async () => {
    const mine = await strandTogether(suite.stack, 2);
    const cursor = await cursorBefore(mine[0]!);
    const saved = { ...process.env };
    Object.assign(process.env, suite.env);
    try {
      const text = await inProcess(["ledger", "stranded", "--limit", "1", "--cursor", cursor], true);
      expect(text.code, text.err).to.equal(0);
      expect(text.out).to.match(/^vaults:\n {2}VAULT_ID +PARENT_VAULT_ID +USER_ID +BALANCE_CENTS +CURRENCY +CLOSED_AT\n/);
      expect(text.out)
        .to.include(`  ${mine[0]}  `)
        .and.match(/\nnext_cursor: \S+\n$/);
      const json = await inProcess(["ledger", "stranded", "--limit", "1", "--cursor", cursor, "--json"], true);
      expect((JSON.parse(json.out).vaults as { vault_id: string }[]).map((v) => v.vault_id)).to.deep.equal([mine[0]]);
    } finally {
      for (const k of Object.keys(suite.env)) if (saved[k] === undefined) delete process.env[k];
      Object.assign(process.env, saved);
    }
  });
});
