import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";

/** The service credentials `serve` keeps in DATA_DIR when their variable is unset. */
export type TokenFile = "admin-token" | "gateway-token";

/** The variable's value, else the token generated into DATA_DIR/<file> on first start (mode 0600). */
async function ensureToken(dataDir: string, file: TokenFile, fromEnv: string | undefined): Promise<string> {
  if (fromEnv) return fromEnv;
  const existing = await readToken(dataDir, file, undefined);
  if (existing) return existing;
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const token = randomBytes(32).toString("base64url");
  // "wx": a concurrent first start keeps whichever file landed first; both then read it.
  await writeFile(join(dataDir, file), `${token}\n`, { mode: 0o600, flag: "wx" }).catch(async (err) => {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  });
  return (await readToken(dataDir, file, undefined))!;
}

/** The variable's value, else DATA_DIR/<file> if a previous start wrote it. */
async function readToken(dataDir: string, file: TokenFile, fromEnv: string | undefined): Promise<string | undefined> {
  if (fromEnv) return fromEnv;
  try {
    return (await readFile(join(dataDir, file), "utf8")).trim() || undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

/** ADMIN_TOKEN, else the one generated into DATA_DIR/admin-token. */
export function ensureAdminToken(dataDir: string, fromEnv: string | undefined): Promise<string> {
  return ensureToken(dataDir, "admin-token", fromEnv);
}

export function readAdminToken(dataDir: string, fromEnv: string | undefined): Promise<string | undefined> {
  return readToken(dataDir, "admin-token", fromEnv);
}

/** GATEWAY_TOKEN, else the one generated into DATA_DIR/gateway-token. */
export function ensureGatewayToken(dataDir: string, fromEnv: string | undefined): Promise<string> {
  return ensureToken(dataDir, "gateway-token", fromEnv);
}

export function readGatewayToken(dataDir: string, fromEnv: string | undefined): Promise<string | undefined> {
  return readToken(dataDir, "gateway-token", fromEnv);
}
