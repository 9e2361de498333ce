import type { Knex } from "knex";
import { canonicalEmail } from "../../../lib/email.js";

/**
 * Addresses stored before e-mails were put in one spelling (NFC, IDNA domain) take it, unless
 * another account already holds that spelling: then the older row stays as it was.
 */
export async function up(knex: Knex): Promise<void> {
  // Only a non-ASCII address or an ACE (xn--) label can change: ASCII was lower-cased on entry.
  const { rows } = await knex.raw(`SELECT id, email FROM users WHERE email ~ '[^\\x01-\\x7f]' OR email ILIKE '%xn--%' ORDER BY created_at, id`);
  for (const row of rows as { id: string; email: string }[]) {
    const canonical = canonicalEmail(row.email);
    if (!canonical || canonical === row.email) continue;
    await knex.raw(`UPDATE users SET email = ? WHERE id = ? AND NOT EXISTS (SELECT 1 FROM users WHERE email = ?)`, [canonical, row.id, canonical]);
  }
}

export async function down(): Promise<void> {
  // The old spellings are not kept; the canonical ones are valid addresses for older versions too.
}
