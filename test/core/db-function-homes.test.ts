import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { expect } from "chai";
import { testDatabase } from "../support/db.js";
import { coreFiles, OWNERS, roomOf, root, touches, withoutComments } from "../support/table-homes.js";

const LEDGER_POSTING = "the books move in the same call as the money, so a payment or refund never half-commits";
const VAULT_TOTALS = "the vault's balance and spend totals change with the postings, under the lock the caller holds";
const BATCH_AUDIT = "a group-committed statement writes each call's audit row with its effect, one round trip per batch";
const BATCH_USER = "the decision reads the user's status inside the statement, so a frozen account stops at once";

/** Tables a SQL function touches on behalf of a calling room that does not own them, each with its reason. */
const CROSS_ROOM: { fn: string; table: string; kind: "read" | "write"; why: string }[] = [
  { fn: "grant_exchange_batch", table: "audit_records", kind: "write", why: BATCH_AUDIT },
  { fn: "grant_exchange_batch", table: "budgets", kind: "read", why: "a code bound to a budget's vault is refused: budgets' vaults take no user grants" },
  { fn: "grant_exchange_batch", table: "users", kind: "read", why: BATCH_USER },
  { fn: "grant_refresh_batch", table: "audit_records", kind: "write", why: BATCH_AUDIT },
  { fn: "grant_refresh_batch", table: "budgets", kind: "read", why: "as for the code exchange: a budget's vault takes no user grants" },
  { fn: "grant_refresh_batch", table: "users", kind: "read", why: BATCH_USER },
  { fn: "partner_access", table: "audit_records", kind: "write", why: BATCH_AUDIT },
  { fn: "partner_access", table: "rate_limit_windows", kind: "write", why: "each read counts against its partner's limit in the statement that decides it" },
  { fn: "partner_access", table: "users", kind: "read", why: BATCH_USER },
  { fn: "partner_access_batch", table: "audit_records", kind: "write", why: BATCH_AUDIT },
  { fn: "partner_access_batch", table: "rate_limit_windows", kind: "write", why: "as for partner_access, for a batch of reads" },
  { fn: "partner_access_batch", table: "users", kind: "read", why: BATCH_USER },
  { fn: "settlement_move", table: "ledger_accounts", kind: "write", why: LEDGER_POSTING },
  { fn: "settlement_move", table: "ledger_postings", kind: "write", why: LEDGER_POSTING },
  { fn: "settlement_move", table: "ledger_transactions", kind: "write", why: LEDGER_POSTING },
  { fn: "settlement_refund", table: "ledger_postings", kind: "write", why: LEDGER_POSTING },
  { fn: "settlement_refund", table: "ledger_transactions", kind: "write", why: LEDGER_POSTING },
  { fn: "settlement_refund", table: "vaults", kind: "write", why: VAULT_TOTALS },
  { fn: "vault_record_spend", table: "ledger_postings", kind: "write", why: LEDGER_POSTING },
  { fn: "vault_record_spend", table: "ledger_transactions", kind: "write", why: LEDGER_POSTING },
  { fn: "vault_reserve_payment", table: "ledger_accounts", kind: "write", why: LEDGER_POSTING },
  { fn: "vault_reserve_payment", table: "ledger_postings", kind: "write", why: LEDGER_POSTING },
  { fn: "vault_reserve_payment", table: "ledger_transactions", kind: "write", why: LEDGER_POSTING },
  { fn: "vault_reserve_payment", table: "vaults", kind: "write", why: VAULT_TOTALS },
];

/**
 * The SQL functions the migrations leave in the database are judged like core's statements: each
 * acts for the rooms whose files call it, or, called by none (a trigger), for the room of what it writes.
 */
describe("SQL functions keep to their callers' tables", () => {
  it("touch another room's table only where the reason is written down", async () => {
    const { db } = await testDatabase();
    const { rows } = (await db.raw(
      `SELECT p.proname AS name, p.prosrc AS body FROM pg_proc p
         JOIN pg_namespace n ON n.oid = p.pronamespace JOIN pg_language l ON l.oid = p.prolang
        WHERE n.nspname = current_schema() AND l.lanname IN ('plpgsql', 'sql')`,
    )) as { rows: { name: string; body: string }[] };
    expect(rows.map((r) => r.name)).to.include.members(["grant_exchange_batch", "partner_access_batch", "vault_record_spend"]);
    const files = await Promise.all((await coreFiles()).map(async (f) => ({ room: roomOf(f), text: withoutComments(await readFile(join(root, f), "utf8")) })));
    const found: { fn: string; table: string; kind: "read" | "write" }[] = [];
    for (const { name, body } of rows) {
      const used = new RegExp(`\\b${name}\\b`);
      const callers = new Set(files.filter((f) => used.test(f.text)).map((f) => f.room));
      const uses = Object.entries(OWNERS).flatMap(([table, owner]) => {
        const kind = touches(body, table);
        return kind ? [{ table, owner, kind }] : [];
      });
      if (callers.size === 0) {
        const writers = new Set(uses.filter((u) => u.kind === "write").map((u) => u.owner));
        expect([...writers], `${name} has no caller in core and writes for more than one room`).to.have.length.below(2);
        for (const w of writers) callers.add(w);
      }
      for (const u of uses) if ([...callers].some((room) => room !== u.owner)) found.push({ fn: name, table: u.table, kind: u.kind });
    }
    const key = (e: { fn: string; table: string; kind: string }) => `${e.kind} ${e.fn} ${e.table}`;
    const listed = new Set(CROSS_ROOM.map(key));
    expect(
      found
        .map(key)
        .filter((k) => !listed.has(k))
        .sort(),
      "cross-room use with no reason written down",
    ).to.deep.equal([]);
    const seen = new Set(found.map(key));
    expect(
      CROSS_ROOM.map(key).filter((k) => !seen.has(k)),
      "reasons for uses that no longer exist",
    ).to.deep.equal([]);
  });
});
