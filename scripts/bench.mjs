// `npm run bench [name ...]`: bundles the benches with the product's code the way
// scripts/build.mjs bundles the service (esbuild, ESM for node20, @bufbuild/protobuf and
// Connect bundled, no names kept), into dist-bench/, then runs dist-bench/run.js.
//
// Why: most benches run the service in their own process, and through tsx they measured
// our TypeScript sources as tsx compiles them, not what ships: tsx keeps function names,
// so every closure made per request paid a __name call (about 1% of a partner read's
// main-thread samples), and the protobuf and Connect modules were separate files from
// node_modules instead of the bundle's copy. The load generator and the agent-tools
// servers are bundled beside them and started with plain node. `npx tsx bench/run.ts`
// still runs the sources (for a profile that names source lines, say).
import { spawn } from "node:child_process";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = fileURLToPath(new URL("../", import.meta.url));
const BUNDLED = new Set(["@bufbuild/protobuf", "@connectrpc/connect", "@connectrpc/connect-node"]);
const pkg = JSON.parse(readFileSync(`${root}package.json`, "utf8"));
const external = [...Object.keys(pkg.dependencies), ...Object.keys(pkg.devDependencies)]
  .filter((name) => !BUNDLED.has(name))
  .flatMap((name) => [name, `${name}/*`]);

const scripts = readdirSync(`${root}bench`).filter((f) => f.endsWith(".bench.ts"));
const entryPoints = Object.fromEntries(
  ["run.ts", "loadgen.ts", "agent-tools-server.ts", ...scripts].map((f) => [f.replace(/\.ts$/, ""), `bench/${f}`]),
);

// Beside bench/ (not under dist/, which `npm run build` replaces), so the benches' paths
// relative to their own file (../scripts, ../bin) hold in both forms.
const outdir = `${root}dist-bench`;
rmSync(outdir, { recursive: true, force: true });
await build({
  absWorkingDir: root,
  entryPoints,
  outdir,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  chunkNames: "[name]-[hash]",
  sourcemap: true,
  external,
  logLevel: "warning",
});

const child = spawn(process.execPath, [`${outdir}/run.js`, ...process.argv.slice(2)], { stdio: "inherit" });
child.on("exit", (code, signal) => {
  if (signal) process.kill(process.pid, signal);
  process.exitCode = code ?? 1;
});
