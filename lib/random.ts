import { randomFillSync } from "node:crypto";

/**
 * CSPRNG bytes drawn 4 KiB at a time and handed out in slices, each once (as randomUUID pools):
 * a call into OpenSSL per request grows costly on a busy machine.
 */
const POOL_BYTES = 4096;
/** The pool; read only the bytes `take` hands out. */
export const pool = Buffer.allocUnsafe(POOL_BYTES);
let offset = POOL_BYTES;

/** The offset in `pool` of `n` (at most 256) bytes nobody else is given. */
export function take(n: number): number {
  if (n < 1 || n > 256) throw new RangeError("take 1 to 256 random bytes at a time");
  if (offset + n > POOL_BYTES) {
    randomFillSync(pool);
    offset = 0;
  }
  const at = offset;
  offset += n;
  return at;
}

/** `n` random bytes as base64url (no padding), as `randomBytes(n).toString("base64url")`. */
export function randomBase64url(n: number): string {
  const at = take(n);
  return pool.toString("base64url", at, at + n);
}
