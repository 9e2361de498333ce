// `npm run build` (docs/cli.md): type-checks, then bundles the CLI with esbuild, because loading
// protobuf and Connect's many small files dominated a short command's start-up. Connect and
// protobuf are bundled once (compared by identity); main.js is written last (bin/ compares times).
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
