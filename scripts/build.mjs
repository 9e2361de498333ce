// `npm run build` (also run by `npm ci` through "prepare"): type-checks the shipped sources,
// then bundles the CLI and service entry point (cli/main.ts) into dist/cli/ with esbuild.
//
// Why a bundle and not tsc's one-file-per-module output: an operator command such as
// `vaultgate partner list` spent most of its ~270 ms resolving and reading the ~160 small
// ESM files of @bufbuild/protobuf and Connect. Bundled, the same command takes ~180 ms.
//
// What is bundled: our code, @bufbuild/protobuf and Connect (they must share one copy: the
// generated code, the RPC router and the clients compare descriptors and ConnectError by
// identity). Every other dependency stays an import from node_modules: PGlite loads its
// WebAssembly next to its own files, knex resolves dialects at run time, pino starts worker
// threads by file path. Commands stay lazy: each is its own chunk, loaded when it runs, so
// `--help` and `--version` load neither the RPC stack nor the database.
//
// The chunks sit beside main.js in dist/cli/, so cli/main.ts finds package.json two levels
// up from any of them. bin/vaultgate.mjs compares dist/cli/main.js's time with the sources',
// so it is written last.
import { execFileSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const root = fileURLToPath(new URL("../", import.meta.url));
const BUNDLED = new Set(["@bufbuild/protobuf", "@connectrpc/connect", "@connectrpc/connect-node"]);

const pkg = JSON.parse(readFileSync(`${root}package.json`, "utf8"));
const external = Object.keys(pkg.dependencies).filter((name) => !BUNDLED.has(name)).flatMap((name) => [name, `${name}/*`]);

rmSync(`${root}dist`, { recursive: true, force: true });
execFileSync(process.execPath, [`${root}node_modules/typescript/bin/tsc`, "-p", `${root}tsconfig.build.json`], { stdio: "inherit" });

await build({
  absWorkingDir: root,
  entryPoints: { main: "cli/main.ts" },
  outdir: "dist/cli",
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
