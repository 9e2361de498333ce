#!/usr/bin/env node
// The operator CLI and service entry point: runs the built bundle in dist/cli/, or the
// TypeScript sources through tsx when dist/ is missing or older than a source (an edit or
// pull not yet rebuilt) or VAULTGATE_DEV=1, so a checkout never runs stale code.
import { existsSync, readdirSync, statSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = fileURLToPath(new URL("../", import.meta.url));
const compiled = `${root}dist/cli/main.js`;

/** The first source newer than the build, if any: a stat per file, cheap next to a rebuild. */
function newerSource(builtAt) {
  const stack = ["cli/", "core/", "gateways/", "gen/", "lib/"];
  while (stack.length > 0) {
    const dir = stack.pop();
    let entries;
    try {
      entries = readdirSync(root + dir, { withFileTypes: true });
    } catch {
      continue;
    }
    for (const e of entries) {
      if (e.isDirectory()) stack.push(`${dir}${e.name}/`);
      else if (e.name.endsWith(".ts") && statSync(root + dir + e.name).mtimeMs > builtAt) return dir + e.name;
    }
  }
  return undefined;
}

let entry = compiled;
let why;
if (process.env.VAULTGATE_DEV === "1") {
  entry = undefined;
} else if (!existsSync(compiled)) {
  why = "dist/ is not built";
  entry = undefined;
} else {
  const stale = newerSource(statSync(compiled).mtimeMs);
  if (stale) {
    why = `dist/ is older than ${stale}`;
    entry = undefined;
  }
}

let main;
if (entry) {
  ({ main } = await import(pathToFileURL(entry).href));
} else {
  if (why && process.stderr.isTTY) process.stderr.write(`vaultgate: ${why}; running the TypeScript sources through tsx (npm run build for the compiled CLI)\n`);
  const { register } = await import("tsx/esm/api");
  register();
  ({ main } = await import(pathToFileURL(`${root}cli/main.ts`).href));
}
process.exitCode = await main(process.argv.slice(2));
