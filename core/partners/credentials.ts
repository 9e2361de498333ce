import { randomBytes, scrypt as scryptCb, timingSafeEqual, createHash, type ScryptOptions } from "node:crypto";

/** spec 2.5: `gpc_<slug>_<8 hex chars>`. */
export function generateClientId(slug: string): string {
  return `gpc_${slug}_${randomBytes(4).toString("hex")}`;
}

/** spec 2.5: `gps_` followed by 32 random bytes in base64url. */
export function generateClientSecret(): string {
  return `gps_${randomBytes(32).toString("base64url")}`;
}

const SLUG = /^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$/;

/** A URL-safe slug: lower-case letters, digits and inner '-', 1-32 characters. */
export function isValidSlug(slug: string): boolean {
  return SLUG.test(slug);
}

/** Derives a slug from a display name, or undefined when nothing usable remains. */
export function slugFromName(name: string): string | undefined {
  const slug = name
    .normalize("NFKD")
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 32)
    .replace(/-+$/, "");
  return slug && isValidSlug(slug) ? slug : undefined;
}

/** Constant-time equality for secrets, hashes and CSRF tokens of any length. */
export function constantTimeEqual(a: string, b: string): boolean {
  // Hash first so unequal lengths cost the same and leak nothing.
  const ha = createHash("sha256").update(a).digest();
  const hb = createHash("sha256").update(b).digest();
  return timingSafeEqual(ha, hb);
}

export interface ScryptParams {
  N: number;
  r: number;
  p: number;
}

export interface SecretHasherOptions {
  params?: ScryptParams;
  /** At most this many derivations at once; the rest queue (DESIGN 7: keep the thread pool free). */
  maxConcurrent?: number;
}

export interface SecretHasher {
  hash(secret: string): Promise<string>;
  verify(secret: string, stored: string): Promise<boolean>;
  /** A hash of a random secret: unknown clients are verified against it (spec 5.2). */
  readonly dummyHash: string;
}

const KEYLEN = 32;

/** Salted scrypt with its parameters stored beside the hash: `scrypt$N$r$p$salt$hash`. */
export async function createSecretHasher(options: SecretHasherOptions = {}): Promise<SecretHasher> {
  const params = options.params ?? { N: 2 ** 14, r: 8, p: 1 };
  const gate = createGate(options.maxConcurrent ?? 2);

  const derive = (secret: string, salt: Buffer, p: ScryptParams) =>
    gate(
      () =>
        new Promise<Buffer>((resolve, reject) => {
          const opts: ScryptOptions = { N: p.N, r: p.r, p: p.p, maxmem: 256 * p.N * p.r + 1024 * 1024 };
          scryptCb(secret, salt, KEYLEN, opts, (err, key) => (err ? reject(err) : resolve(key)));
        }),
    );

  const hash = async (secret: string) => {
    const salt = randomBytes(16);
    const key = await derive(secret, salt, params);
    return `scrypt$${params.N}$${params.r}$${params.p}$${salt.toString("base64url")}$${key.toString("base64url")}`;
  };

  const dummyHash = await hash(randomBytes(32).toString("base64url"));

  return {
    hash,
    dummyHash,
    async verify(secret, stored) {
      const parts = stored.split("$");
      const [scheme, n, r, p, salt, expected] = parts;
      if (parts.length !== 6 || scheme !== "scrypt" || !salt || !expected) return false;
      const key = await derive(secret, Buffer.from(salt, "base64url"), { N: Number(n), r: Number(r), p: Number(p) });
      const want = Buffer.from(expected, "base64url");
      return want.length === key.length && timingSafeEqual(key, want);
    },
  };
}

/** A counting semaphore as a function wrapper. */
function createGate(max: number) {
  let active = 0;
  const waiting: (() => void)[] = [];
  return async <T>(work: () => Promise<T>): Promise<T> => {
    if (active >= max) await new Promise<void>((resolve) => waiting.push(resolve));
    else active++;
    try {
      return await work();
    } finally {
      const next = waiting.shift();
      if (next) next();
      else active--;
    }
  };
}

/** SHA-256 for tokens and codes at rest (they are high-entropy; no salt needed). */
export function sha256Hex(value: string): string {
  return createHash("sha256").update(value).digest("hex");
}
