// `npm run build` (also run by `npm ci` through "prepare"): type-checks, then bundles cli/main.ts
// into dist/cli/ with esbuild, because resolving the many small ESM files of protobuf and Connect
// dominated a short operator command's start-up.
//
// Bundled: our code, @bufbuild/protobuf and Connect (descriptors and ConnectError are compared by
// identity, so one copy); everything else stays in node_modules (PGlite, knex and pino load files
// by path). Each command is its own chunk beside main.js (package.json stays two levels up), and
// main.js is written last because bin/vaultgate.mjs compares its time with the sources'.
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
