import { expect } from "chai";
import { chmod, lstat, mkdir, readdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { runCli, startServiceProcess, tempDataDir } from "../support/process.js";

/** Every entry below `dir` (itself included) with its permission bits, links left out. */
async function modes(dir: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const walk = async (path: string) => {
    const st = await lstat(path);
    if (st.isSymbolicLink()) return;
    // Directories 0700, files 0600: anything else is loose.
    const mode = (st.mode & 0o777).toString(8);
    out.set(path, st.isDirectory() ? (mode === "700" ? "700" : `dir ${mode}`) : mode === "600" ? "600" : `file ${mode}`);
    if (st.isDirectory()) for (const name of await readdir(path)) await walk(join(path, name));
  };
  await walk(dir);
  return out;
}

/**
 * DATA_DIR holds keys, tokens and the embedded database: whatever modes it had, a start
 * leaves it 0700 with every file 0600, the files the embedded database creates included,
 * and says in the log what it tightened.
 */
describe("vaultgate serve: DATA_DIR permissions (real process)", function () {
  this.timeout(90_000);

  it("a 0777 DATA_DIR with a 0666 file ends 0700/0600 everywhere, the embedded database's files included", async () => {
    const dir = await tempDataDir();
    const data = join(dir.path, "data");
    await mkdir(data);
    await chmod(data, 0o777);
    await writeFile(join(data, "notes.txt"), "x");
    await chmod(join(data, "notes.txt"), 0o666);
    const proc = await startServiceProcess("all", { DATA_DIR: data, DATABASE_URL: "" });
    try {
      const found = await modes(data);
      const loose = [...found].filter(([, m]) => m !== "700" && m !== "600");
      expect(loose, "entries with other modes").to.deep.equal([]);
      expect(found.get(data)).to.equal("700");
      expect(found.get(join(data, "notes.txt"))).to.equal("600");
      // The embedded database wrote its files during this start.
      const pgFiles = [...found.keys()].filter((p) => p.startsWith(`${join(data, "pgdata")}/`));
      expect(pgFiles.length).to.be.greaterThan(10);
      for (const name of ["signin-code-key", "webhook-secret-key", "admin-token"]) expect(found.get(join(data, name)), name).to.equal("600");
      const line = proc
        .output()
        .split("\n")
        .filter((l) => l.includes("DATA_DIR permissions tightened"))
        .map((l) => JSON.parse(l) as { tightened: string[] });
      expect(line).to.have.length(1);
      expect(line[0]!.tightened).to.include.members([".", "notes.txt"]);
    } finally {
      await proc.stop();
      await dir.remove();
    }
  });
});

describe("vaultgate: a DATA_DIR that is not a directory (real processes)", function () {
  this.timeout(90_000);

  it("is one line naming DATA_DIR (exit 1) for every command, never a raw ENOTDIR or EEXIST", async () => {
    const dir = await tempDataDir();
    try {
      const file = join(dir.path, "not-a-dir");
      await writeFile(file, "x");
      for (const dataDir of [file, join(file, "below")]) {
        for (const args of [["serve"], ["migrate"], ["partner", "list"], ["wallet", "address", "--chain", "base"]]) {
          const res = await runCli(args, { DATA_DIR: dataDir, PORT: "0", CORE_PORT: "0", DATABASE_URL: "", ADMIN_TOKEN: "" });
          expect(res.code, `${args.join(" ")}: ${res.stderr}`).to.equal(1);
          expect(res.stdout).to.equal("");
          expect(res.stderr).to.equal(`vaultgate: DATA_DIR=${dataDir} is not a directory (${file} is a file): point DATA_DIR at a directory\n`);
        }
      }
    } finally {
      await dir.remove();
    }
  });
});
