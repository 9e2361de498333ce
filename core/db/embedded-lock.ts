import { closeSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from "node:fs";
import { dirname } from "node:path";

/**
 * Claims the embedded database in `dir` for this process (`<dir>.lock`, holding its pid) and
 * returns the release. Two processes on one PGlite directory would each overwrite the other's
 * writes, so a second opener is refused while the holder lives; a dead holder's lock is taken over.
 */
export function lockEmbeddedDatabase(dir: string): () => void {
  const file = `${dir}.lock`;
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  for (let attempt = 0; attempt < 3; attempt++) {
    let fd: number;
    try {
      fd = openSync(file, "wx", 0o600);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      const holder = holderOf(file);
      if (holder !== undefined && holder !== process.pid && alive(holder)) {
        throw new Error(
          `the embedded database in ${dir} is open in process ${holder}: one process at a time uses it; stop that one first, or run CLI commands against the running service`,
        );
      }
      rmSync(file, { force: true });
      continue;
    }
    writeSync(fd, `${process.pid}\n`);
    closeSync(fd);
    return () => {
      if (holderOf(file) === process.pid) rmSync(file, { force: true });
    };
  }
  throw new Error(`cannot claim the embedded database in ${dir}: ${file} keeps changing`);
}

function holderOf(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, "utf8").trim());
    return Number.isSafeInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists but belongs to another user, which still holds the files.
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
