import { randomBytes } from "node:crypto";
import { mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";

const FILE = "admin-token";

/** ADMIN_TOKEN, else the one generated into DATA_DIR on first start (mode 0600). */
export async function ensureAdminToken(dataDir: string, fromEnv: string | undefined): Promise<string> {
  if (fromEnv) return fromEnv;
  const existing = await readAdminToken(dataDir, undefined);
  if (existing) return existing;
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const token = randomBytes(32).toString("base64url");
  await writeFile(join(dataDir, FILE), token + "\n", { mode: 0o600, flag: "wx" }).catch(async (err) => {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
  });
  return (await readAdminToken(dataDir, undefined))!;
}

export async function readAdminToken(dataDir: string, fromEnv: string | undefined): Promise<string | undefined> {
  if (fromEnv) return fromEnv;
  try {
    return (await readFile(join(dataDir, FILE), "utf8")).trim() || undefined;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}
