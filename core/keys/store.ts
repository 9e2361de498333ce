import type { JWK } from "jose";
import type { Knex } from "knex";
import { firstWrittenValue } from "../db/instance-values.js";
import type { Db } from "../db/knex.js";
import { ROTATED_KEY_GRACE_MS, type KeyState } from "./lifecycle.js";

type Conn = Knex | Knex.Transaction;

interface KeyRow {
  kid: string;
  public_jwk: JWK | string;
  created_at: Date | string;
  rotated_at: Date | string | null;
  retired_at: Date | string | null;
}

const COLUMNS = `kid, public_jwk, created_at, rotated_at, retired_at`;

function toState(r: KeyRow): KeyState {
  const date = (v: Date | string | null) => (v === null ? null : new Date(v));
  return {
    kid: r.kid,
    jwk: typeof r.public_jwk === "string" ? (JSON.parse(r.public_jwk) as JWK) : r.public_jwk,
    createdAt: new Date(r.created_at),
    rotatedAt: date(r.rotated_at),
    retiredAt: date(r.retired_at),
  };
}

/** Published public keys and their lifecycle, shared by every replica so JWKS and verifiers agree. */
export function createKeysStore(db: Db) {
  return {
    async publish(conn: Conn, kid: string, jwk: JWK, at: Date): Promise<void> {
      await conn.raw(`INSERT INTO signing_keys (kid, public_jwk, created_at) VALUES (?, ?::jsonb, ?) ON CONFLICT (kid) DO NOTHING`, [
        kid,
        JSON.stringify(jwk),
        at,
      ]);
    },
    async get(kid: string, conn: Conn = db): Promise<KeyState | undefined> {
      const { rows } = await conn.raw(`SELECT ${COLUMNS} FROM signing_keys WHERE kid = ?`, [kid]);
      const row = (rows as KeyRow[])[0];
      return row ? toState(row) : undefined;
    },
    /** Keys that may still verify something at `now`: neither retired nor rotated out past the grace. */
    async listLive(now: Date): Promise<KeyState[]> {
      const { rows } = await db.raw(
        `SELECT ${COLUMNS} FROM signing_keys
          WHERE retired_at IS NULL AND (rotated_at IS NULL OR rotated_at >= ?)
          ORDER BY created_at DESC, kid`,
        [new Date(now.getTime() - ROTATED_KEY_GRACE_MS)],
      );
      return (rows as KeyRow[]).map(toState);
    },
    /** Marks a key rotated (first time only); a retired key stays retired. */
    async markRotated(conn: Conn, kid: string, at: Date): Promise<void> {
      await conn.raw(`UPDATE signing_keys SET rotated_at = ? WHERE kid = ? AND rotated_at IS NULL AND retired_at IS NULL`, [at, kid]);
    },
    /** Retires a key (idempotent: the first retirement time is kept); false when no such kid. */
    async retire(conn: Conn, kid: string, at: Date): Promise<boolean> {
      const { rows } = await conn.raw(`UPDATE signing_keys SET retired_at = COALESCE(retired_at, ?) WHERE kid = ? RETURNING kid`, [at, kid]);
      return (rows as unknown[]).length > 0;
    },
  };
}

export type KeysStore = ReturnType<typeof createKeysStore>;

/**
 * Records `value` as the check value of the outside key `name` unless one is recorded
 * already, and returns the recorded one (the first writer wins, concurrent starts agree).
 */
export function recordKeyCheck(db: Db, name: string, value: Buffer): Promise<Buffer> {
  return firstWrittenValue(db, `key-check:${name}`, value);
}
