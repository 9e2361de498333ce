/**
 * `npm run bench`: runs every bench/*.bench.ts (or those named on the command line)
 * one after another and prints their tables. Each module exports
 * `run(): Promise<void>` and prints its own results next to the peer or ceiling it is
 * judged against, measured in the same run.
 */
import { readdir } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { stopBenchPostgres } from "./support.js";

const here = dirname(fileURLToPath(import.meta.url));
const wanted = process.argv.slice(2);
const files = (await readdir(here)).filter((f) => f.endsWith(".bench.ts")).sort();
try {
  for (const file of files) {
    const name = file.replace(/\.bench\.ts$/, "");
    if (wanted.length > 0 && !wanted.includes(name)) continue;
    console.log(`\n### ${name}`);
    const mod = (await import(pathToFileURL(join(here, file)).href)) as { run(): Promise<void> };
    await mod.run();
  }
} finally {
  await stopBenchPostgres();
}
