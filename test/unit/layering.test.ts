import { readdir, readFile } from "node:fs/promises";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "chai";

const root = fileURLToPath(new URL("../..", import.meta.url));

async function tsFiles(dir: string): Promise<string[]> {
  const entries = await readdir(join(root, dir), { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((e) => (e.isDirectory() ? tsFiles(join(dir, e.name)) : Promise.resolve(e.name.endsWith(".ts") ? [join(dir, e.name)] : []))),
  );
  return nested.flat();
}

function importsOf(source: string): string[] {
  return [...source.matchAll(/^\s*(?:import|export)\s[^;]*?from\s+["']([^"']+)["']/gm)].map((m) => m[1]!);
}

/** STYLE dependency direction: gateways never reach core or the database; stores never import Connect. */
describe("layering", () => {
  it("gateways import neither core/ nor knex/pg", async () => {
    const offenders: string[] = [];
    for (const file of await tsFiles("gateways")) {
      for (const spec of importsOf(await readFile(join(root, file), "utf8"))) {
        if (/(^|\/)core\//.test(spec) || /^(knex|pg|@electric-sql\/pglite|knex-pglite)$/.test(spec)) offenders.push(`${relative(root, join(root, file))} -> ${spec}`);
      }
    }
    expect(offenders).to.deep.equal([]);
  });

  it("stores do not import Connect", async () => {
    const offenders: string[] = [];
    for (const file of (await tsFiles("core")).filter((f) => /store\.ts$/.test(f))) {
      for (const spec of importsOf(await readFile(join(root, file), "utf8"))) {
        if (spec.startsWith("@connectrpc/")) offenders.push(`${file} -> ${spec}`);
      }
    }
    expect(offenders).to.deep.equal([]);
  });

  it("only cli/config.ts reads process.env", async () => {
    const offenders: string[] = [];
    for (const dir of ["core", "gateways", "cli"]) {
      for (const file of await tsFiles(dir)) {
        if (file === join("cli", "config.ts") || file === join("cli", "main.ts")) continue;
        if (/process\.env/.test(await readFile(join(root, file), "utf8"))) offenders.push(file);
      }
    }
    expect(offenders).to.deep.equal([]);
  });
});
