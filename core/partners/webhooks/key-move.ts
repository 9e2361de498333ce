import type { Logger } from "pino";
import { deleteValue, lockedValue } from "../../db/instance-values.js";
import type { Db } from "../../db/knex.js";
import { createSecretBox, type SecretBox } from "./signing.js";

/** The name under which earlier versions kept the webhook-secret key in the database. */
const LEGACY_KEY = "webhook-secrets";

/**
 * Moves webhook secrets from the database-held key to the outside key in one transaction,
 * holding the legacy row locked so a second replica starting at once finds nothing left.
 * Idempotent; returns how many secrets were re-encrypted.
 */
export async function moveWebhookKeyOutOfDatabase(db: Db, box: SecretBox, logger: Logger): Promise<number> {
  const moved = await db.transaction(async (trx) => {
    const legacy = await lockedValue(trx, LEGACY_KEY);
    if (!legacy) return undefined;
    const old = createSecretBox(legacy);
    const partners = (await trx.raw(`SELECT id, webhook_secret_enc FROM partners WHERE webhook_secret_enc IS NOT NULL FOR UPDATE`)).rows as {
      id: string;
      webhook_secret_enc: string;
    }[];
    let count = 0;
    for (const p of partners) {
      let plain: string;
      try {
        plain = old.open(p.webhook_secret_enc);
      } catch {
        // Not sealed under the old key (already moved, or unreadable): left as it is.
        logger.warn({ partnerId: p.id }, "webhook secret not readable with the database key; left unchanged");
        continue;
      }
      await trx("partners")
        .where({ id: p.id })
        .update({ webhook_secret_enc: box.seal(plain) });
      count++;
    }
    await deleteValue(trx, LEGACY_KEY);
    return count;
  });
  if (moved !== undefined)
    logger.info({ secrets: moved }, "webhook secrets re-encrypted under the key outside the database; the database copy of the old key was deleted");
  return moved ?? 0;
}
