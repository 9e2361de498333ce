import { readdir, readFile } from "node:fs/promises";
import { join, sep } from "node:path";
import { expect } from "chai";
import { coreFiles, OWNERS, roomOf, root, touches, withoutComments } from "../support/table-homes.js";

const VERIFY = "ledger verify compares the books with the balances and payouts other rooms keep; the ledger sits below them all";

/** Statements that read a table of another room, each with the reason it is not the owner's fragment. */
const CROSS_ROOM_READS: { file: string; table: string; why: string }[] = [
  {
    file: "core/budgets/money-view-store.ts",
    table: "agent_principals",
    why: "the owner's money page names each budget's agent in the one read that lists the vaults",
  },
  {
    file: "core/budgets/stores/grant-vaults.ts",
    table: "agent_principals",
    why: "the consent page's one read of the user's vaults names each budget's agent beside the budget's status",
  },
  { file: "core/budgets/money-view-store.ts", table: "settlement_payments", why: "each recent payment shows its settlement state from that same read" },
  { file: "core/grants/stores/budget-grants.ts", table: "users", why: "a grant acts only while its user's account is active: read with the grant" },
  { file: "core/grants/stores/grants.ts", table: "users", why: "as above, for the grant rows the token endpoints read" },
  {
    file: "core/identity/users-store.ts",
    table: "vaults",
    why: "the operator's user list names each user's root vault in the read that pages the users",
  },
  { file: "core/ledger/store.ts", table: "settlement_payments", why: VERIFY },
  { file: "core/ledger/store.ts", table: "treasuries", why: VERIFY },
  { file: "core/ledger/store.ts", table: "treasury_executions", why: VERIFY },
  { file: "core/ledger/store.ts", table: "vaults", why: VERIFY },
  {
    file: "core/ledger/transfers.ts",
    table: "treasury_executions",
    why: "a user's transfers feed lists their payouts beside their ledger entries, in one ordered read",
  },
  {
    file: "core/treasury/store.ts",
    table: "consents",
    why: "a batch reads its recipients and their consents in one statement, once the users store holds their rows (FOR KEY SHARE)",
  },
  { file: "core/treasury/store.ts", table: "users", why: "the same statement: each recipient must exist and be active" },
  {
    file: "core/treasury/store.ts",
    table: "partners",
    why: "a batch's statement raises transfer.settled only for partners entitled to read transfers, in the insert that records it",
  },
];

/** Statements that write a table of another room, each with its reason. */
const CROSS_ROOM_WRITES: { file: string; table: string; why: string }[] = [];

describe("every table has one home", () => {
  it("tells statements that write a table from those that read it, and ignores comments", () => {
    const seen = (code: string) => touches(withoutComments(code), "grants");
    expect(seen("await trx.raw(`UPDATE grants SET state = ?`)")).to.equal("write");
    expect(seen('await trx("grants").where({ id }).update({ state })')).to.equal("write");
    expect(seen('const prune = pruneBatchSql("grants", "expires_at < ?", "expires_at");')).to.equal("write");
    expect(seen("await conn.raw(`SELECT 1 FROM grants g WHERE g.id = ?`)")).to.equal("read");
    expect(seen('await q.leftJoin("grants as g", "g.id", "x.grant_id")')).to.equal("read");
    expect(seen("// reads FROM grants\nconst x = 1;")).to.equal(undefined);
  });

  it("finds no CTE named after a table: its reads would pass for reads of the table", async () => {
    const found: string[] = [];
    for (const file of await coreFiles()) {
      const source = withoutComments(await readFile(join(root, file), "utf8"));
      for (const table of Object.keys(OWNERS)) {
        if (new RegExp(`\\b${table}\\s+AS\\s+(NOT\\s+)?(MATERIALIZED\\s+)?\\(`).test(source)) found.push(`${file.split(sep).join("/")} ${table}`);
      }
    }
    expect(found.sort()).to.deep.equal([]);
  });

  it("names an owner for every table the migrations create", async () => {
    const dir = join(root, "core", "db", "migrations");
    const created = new Set<string>();
    for (const f of await readdir(dir)) {
      const text = await readFile(join(dir, f), "utf8");
      for (const m of text.matchAll(/CREATE TABLE (?:IF NOT EXISTS )?([a-z_]+)|createTable(?:IfNotExists)?\(\s*["']([a-z_]+)/g)) created.add((m[1] ?? m[2])!);
    }
    expect([...created].filter((t) => !(t in OWNERS)).sort(), "tables without an owner").to.deep.equal([]);
  });

  it("only the owning room writes a table, and other rooms read it only where the reason is written down", async () => {
    const found: { file: string; table: string; kind: "read" | "write" }[] = [];
    for (const file of await coreFiles()) {
      const source = withoutComments(await readFile(join(root, file), "utf8"));
      for (const [table, owner] of Object.entries(OWNERS)) {
        if (roomOf(file) === owner) continue;
        const kind = touches(source, table);
        if (kind) found.push({ file: file.split(sep).join("/"), table, kind });
      }
    }
    const key = (e: { file: string; table: string }) => `${e.file} ${e.table}`;
    const allowed = (list: { file: string; table: string }[]) => new Set(list.map(key));
    const reads = allowed(CROSS_ROOM_READS);
    const writes = allowed(CROSS_ROOM_WRITES);
    const unexplained = found.filter((e) => !(e.kind === "read" ? reads.has(key(e)) || writes.has(key(e)) : writes.has(key(e))));
    expect(unexplained.map((e) => `${e.kind} ${key(e)}`).sort(), "cross-room statements with no reason written down").to.deep.equal([]);
    const stale = [...CROSS_ROOM_READS, ...CROSS_ROOM_WRITES].filter((e) => !found.some((f) => key(f) === key(e)));
    expect(stale.map(key), "reasons for statements that no longer exist").to.deep.equal([]);
  });
});
