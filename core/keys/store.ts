import type { JWK } from "jose";
import type { Db } from "../db/knex.js";

/** Published public keys, shared by every replica so JWKS agree. */
export function createKeysStore(db: Db) {
  return {
    async publish(kid: string, jwk: JWK, at: Date): Promise<void> {
      await db.raw(
        `INSERT INTO signing_keys (kid, public_jwk, created_at) VALUES (?, ?::jsonb, ?) ON CONFLICT (kid) DO NOTHING`,
        [kid, JSON.stringify(jwk), at],
      );
    },
    async listPublished(): Promise<{ kid: string; jwk: JWK }[]> {
      const { rows } = await db.raw(`SELECT kid, public_jwk FROM signing_keys ORDER BY created_at DESC, kid`);
      return (rows as { kid: string; public_jwk: JWK | string }[]).map((r) => ({
        kid: r.kid,
        jwk: typeof r.public_jwk === "string" ? (JSON.parse(r.public_jwk) as JWK) : r.public_jwk,
      }));
    },
  };
}
