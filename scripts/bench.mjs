// `npm run bench [name ...]`: builds dist/ and bundles the benches with our code as the build
// does, so every server runs what ships rather than tsx-compiled sources (which kept names and
// separate module copies). Details in docs/benchmarks.md.
import { execFileSync, spawn } from "node:child_process";
import { readdirSync, readFileSync, rmSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { build } from "esbuild";
import { BUNDLE_OPTIONS, externals, root } from "./bundle.mjs";

// The benches that start `vaultgate serve` or the CLI as a process (ledger, partner-token,
// startup) run bin/vaultgate.mjs, which falls back to the TypeScript sources when dist/ is
// older than any of them: build it first, so they too measure what ships.
execFileSync(process.execPath, [`${root}scripts/build.mjs`], { stdio: "inherit" });

const scripts = readdirSync(`${root}bench`).filter((f) => f.endsWith(".bench.ts"));
const entryPoints = Object.fromEntries(
  ["run.ts", "loadgen.ts", "agent-oauth-peer.ts", "agent-tools-server.ts", "bare-refuser.ts", ...scripts].map((f) => [f.replace(/\.ts$/, ""), `bench/${f}`]),
);

// Code outside bench/ finds files relative to its own source, so such a module keeps its
// source file's URL; inside a bundle chunk the URL would be the chunk's.
const sourceUrls = {
  name: "source-import-meta-url",
  setup(b) {
    b.onLoad({ filter: /\.ts$/ }, (args) => {
      if (args.path.startsWith(`${root}bench/`)) return undefined;
      const text = readFileSync(args.path, "utf8");
      if (!text.includes("import.meta.url")) return undefined;
      return { contents: text.replaceAll("import.meta.url", JSON.stringify(pathToFileURL(args.path).href)), loader: "ts" };
    });
  },
};

// Beside bench/ (not under dist/, which `npm run build` replaces), so the benches' paths
// relative to their own file (../scripts, ../bin) hold in both forms.
const outdir = `${root}dist-bench`;
rmSync(outdir, { recursive: true, force: true });
await build({
  ...BUNDLE_OPTIONS,
  entryPoints,
  outdir,
  external: externals("dependencies", "devDependencies"),
  plugins: [sourceUrls],
});

const child = spawn(process.execPath, [`${outdir}/run.js`, ...process.argv.slice(2)], { stdio: "inherit" });
child.on("exit", (code, signal) => {
  if (signal) process.kill(process.pid, signal);
  process.exitCode = code ?? 1;
});
