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
import { rmSync } from "node:fs";
import { build } from "esbuild";
import { BUNDLE_OPTIONS, externals, root } from "./bundle.mjs";

rmSync(`${root}dist`, { recursive: true, force: true });
execFileSync(process.execPath, [`${root}node_modules/typescript/bin/tsc`, "-p", `${root}tsconfig.build.json`], { stdio: "inherit" });

await build({
  ...BUNDLE_OPTIONS,
  entryPoints: { main: "cli/main.ts" },
  outdir: "dist/cli",
  external: externals("dependencies"),
});
