import { existsSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import { dirname, join, relative, sep } from "node:path";
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

/** Every hand-written code file of the repository (generated code, migrations and dependencies left out). */
const CODE = /\.(ts|mts|cts|js|mjs|cjs|sh|proto)$/;
/** Generated code, migrations (history, never edited) and build or run output (gitignored). */
const NOT_HAND_WRITTEN = new Set(["node_modules", "gen", join("core", "db", "migrations"), "dist", "dist-bench", "bench-results", "test-artifacts", "scratch"]);

async function handWritten(dir = ""): Promise<string[]> {
  const entries = await readdir(join(root, dir), { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((e) => {
      const path = join(dir, e.name);
      if (e.name.startsWith(".") || NOT_HAND_WRITTEN.has(path)) return Promise.resolve([]);
      if (e.isDirectory()) return handWritten(path);
      return Promise.resolve(CODE.test(e.name) ? [path] : []);
    }),
  );
  return nested.flat();
}

/** Module specifiers a file loads: static imports, re-exports, side-effect and dynamic imports. */
function allImportsOf(source: string): string[] {
  const patterns = [/^\s*(?:import|export)\s[^;]*?from\s+["']([^"']+)["']/gm, /^\s*import\s+["']([^"']+)["']/gm, /\bimport\(\s*["']([^"']+)["']\s*\)/g];
  return patterns.flatMap((p) => [...source.matchAll(p)].map((m) => m[1]!));
}

/** The repository file a relative specifier names (".js" in a specifier stands for the ".ts" source). */
function resolveLocal(from: string, spec: string): string | undefined {
  if (!spec.startsWith(".")) return undefined;
  const base = join(dirname(from), spec);
  const candidates = [base, base.replace(/\.js$/, ".ts"), base.replace(/\.mjs$/, ".mts"), `${base}.ts`, join(base, "index.ts")];
  return candidates.find((c) => CODE.test(c) && existsSync(join(root, c)));
}

/** The import graph of the hand-written code, type-only imports included (they couple too). */
async function importGraph(): Promise<Map<string, string[]>> {
  const graph = new Map<string, string[]>();
  for (const file of await handWritten()) {
    const targets = allImportsOf(await readFile(join(root, file), "utf8"))
      .map((spec) => resolveLocal(file, spec))
      .filter((t): t is string => t !== undefined);
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** Each import cycle once, as the files around it (Tarjan's strongly connected components). */
function cycles(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const found: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        component.push(w);
      } while (w !== v);
      if (component.length > 1 || (graph.get(v) ?? []).includes(v)) found.push(component.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return found;
}

/**
 * Rooms of core that own a part of the domain. Platform code (core's top-level files,
 * core/db, core/observability, core/net, lib) serves them all and so imports none of them;
 * only the composition root, which wires rooms together, may.
 */
const PLATFORM_ROOMS = ["db", "observability", "net"];
/** Every folder of core/ that is not platform is a domain room: a new one is checked without being listed. */
const DOMAIN_ROOMS = (await readdir(join(root, "core"), { withFileTypes: true }))
  .filter((e) => e.isDirectory() && !PLATFORM_ROOMS.includes(e.name))
  .map((e) => e.name);
const COMPOSITION_ROOTS = [join("core", "core.ts"), join("core", "core-options.ts")];

function roomOf(file: string): string | undefined {
  const parts = file.split(sep);
  return parts[0] === "core" && parts.length > 2 && DOMAIN_ROOMS.includes(parts[1]!) ? parts[1] : undefined;
}

/** core/<folder> for any file in a folder of core, domain room or platform. */
function folderOf(file: string): string | undefined {
  const parts = file.split(sep);
  return parts[0] === "core" && parts.length > 2 ? parts[1] : undefined;
}

function isPlatform(file: string): boolean {
  const parts = file.split(sep);
  if (parts[0] === "lib") return true;
  if (parts[0] !== "core" || COMPOSITION_ROOTS.includes(file)) return false;
  return parts.length === 2 || PLATFORM_ROOMS.includes(parts[1]!);
}

const MAX_LINES = 400;

/** Dependency direction: gateways never reach core or the database; stores never import Connect. */
describe("layering", () => {
  it("gateways import neither core/ nor knex/pg", async () => {
    const offenders: string[] = [];
    for (const file of await tsFiles("gateways")) {
      for (const spec of importsOf(await readFile(join(root, file), "utf8"))) {
        if (/(^|\/)core\//.test(spec) || /^(knex|pg|@electric-sql\/pglite|knex-pglite)$/.test(spec))
          offenders.push(`${relative(root, join(root, file))} -> ${spec}`);
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

  it("has no import cycle anywhere in the source tree", async () => {
    const found = cycles(await importGraph()).map((c) => c.join(" -> ").split(sep).join("/"));
    expect(found, "import cycles").to.deep.equal([]);
  });

  it("platform code imports no domain room", async () => {
    const offenders: string[] = [];
    for (const [file, targets] of await importGraph()) {
      if (!isPlatform(file)) continue;
      for (const t of targets) if (roomOf(t) !== undefined) offenders.push(`${file} -> ${t}`);
    }
    expect(offenders).to.deep.equal([]);
  });

  it("the folders of core import each other in no circle, of two rooms or more", async () => {
    const folders = new Map<string, Set<string>>();
    for (const [file, targets] of await importGraph()) {
      const from = folderOf(file);
      if (from === undefined) continue;
      for (const t of targets) {
        const to = folderOf(t);
        if (to !== undefined && to !== from) folders.set(from, (folders.get(from) ?? new Set()).add(to));
      }
    }
    const graph = new Map([...folders].map(([from, to]) => [from, [...to]]));
    expect(cycles(graph), "folders of core in a circle").to.deep.equal([]);
    expect(DOMAIN_ROOMS).to.include.members(["audit", "budgets", "grants", "settlement", "treasury"]);
  });

  it(`no hand-written source file is over ${MAX_LINES} lines`, async () => {
    const over: string[] = [];
    for (const file of await handWritten()) {
      const text = await readFile(join(root, file), "utf8");
      const lines = text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
      if (lines > MAX_LINES) over.push(file);
    }
    expect(over.sort(), "over the limit").to.deep.equal([]);
  });
});
