import { statSync } from "node:fs";
import { chmod, lstat, mkdir, readdir } from "node:fs/promises";
import { dirname, join, relative } from "node:path";
import type { Logger } from "pino";
import { ConfigError } from "./config.js";

/**
 * DATA_DIR holds keys, tokens and the embedded database, so at every start it is made 0700 and
 * its files 0600, with a umask for later files; a mode that cannot be changed refuses the start.
 */
export async function secureDataDir(dataDir: string, logger: Logger, when: "start" | "database opened" = "start"): Promise<void> {
  process.umask(0o077);
  await mkdir(dataDir, { recursive: true, mode: 0o700 });
  const tightened: string[] = [];
  async function fix(path: string, want: number) {
    const st = await lstat(path);
    if ((st.mode & 0o777) === want) return;
    try {
      await chmod(path, want);
    } catch (err) {
      const uid = process.getuid?.();
      throw new ConfigError(
        `cannot restrict ${path} to mode ${want.toString(8)} (${(err as NodeJS.ErrnoException).code ?? "error"}): it is owned by uid ${st.uid}` +
          `${uid === undefined ? "" : ` and vaultgate runs as uid ${uid}`}; chown -R the DATA_DIR to the user running vaultgate, or point DATA_DIR elsewhere`,
      );
    }
    tightened.push(relative(dataDir, path) || ".");
  }
  async function walk(dir: string) {
    await fix(dir, 0o700);
    for (const entry of await readdir(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      // Links are not followed: what they point at is not ours to change.
      if (entry.isDirectory()) await walk(path);
      else if (entry.isFile()) await fix(path, 0o600);
    }
  }
  await walk(dataDir);
  // The embedded database sets modes of its own on the files it creates (0666): they are
  // restricted again once it has opened, quietly, as that happens on every first start.
  if (when === "database opened") {
    if (tightened.length > 0) logger.debug({ dataDir, count: tightened.length }, "embedded database files restricted to 0600");
  } else if (tightened.length > 0) {
    logger.info(
      { dataDir, tightened: tightened.slice(0, 20), count: tightened.length },
      `DATA_DIR permissions tightened to 0700/0600 for ${tightened.length} entr${tightened.length === 1 ? "y" : "ies"}`,
    );
  }
}

/** Every command reads or creates DATA_DIR: one that is (or lies below) a file is named here, not as ENOTDIR later. */
export function checkDataDirPath(dataDir: string): void {
  const chain: string[] = [];
  for (let p = dataDir; !chain.includes(p); p = dirname(p)) chain.unshift(p);
  for (const p of chain) {
    let isDir: boolean;
    try {
      isDir = statSync(p).isDirectory();
    } catch {
      return; // missing (created on first use) or unreadable (reported where it is used)
    }
    if (!isDir) throw new ConfigError(`DATA_DIR=${dataDir} is not a directory (${p} is a file): point DATA_DIR at a directory`);
  }
}
