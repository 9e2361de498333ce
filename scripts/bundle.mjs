// How our code is bundled, shared by the service build (scripts/build.mjs) and the benches
// (scripts/bench.mjs), so the benches measure code compiled exactly as it ships.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const root = fileURLToPath(new URL("../", import.meta.url));

/** Bundled with our code: they must share one copy (descriptors and ConnectError compare by identity). */
export const BUNDLED = new Set(["@bufbuild/protobuf", "@connectrpc/connect", "@connectrpc/connect-node"]);

const pkg = JSON.parse(readFileSync(`${root}package.json`, "utf8"));

/** Every other package of these dependency lists stays an import from node_modules. */
export function externals(...lists) {
  return lists
    .flatMap((list) => Object.keys(pkg[list]))
    .filter((name) => !BUNDLED.has(name))
    .flatMap((name) => [name, `${name}/*`]);
}

/** esbuild's options for our bundles: ESM for node20, chunks beside their entries, source maps. */
export const BUNDLE_OPTIONS = {
  absWorkingDir: root,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  chunkNames: "[name]-[hash]",
  sourcemap: true,
  logLevel: "warning",
};
