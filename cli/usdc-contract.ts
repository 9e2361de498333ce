import { createHash } from "node:crypto";
import { mkdir, readFile, rename, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Abi, Hex } from "viem";

/**
 * The local USDC contract compiled on demand with solc-js; the artifact is derived, so it is
 * cached in .cache/ (gitignored) by source and compiler hash because compiling takes seconds.
 */
export interface UsdcArtifact {
  abi: Abi;
  bytecode: Hex;
}

/** The checkout: the folder above this file holding contracts/ (from the sources or the dist/cli bundle). */
function repositoryRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "contracts", "USDC.sol"))) {
    const up = dirname(dir);
    if (up === dir) throw new Error("contracts/USDC.sol not found above the vaultgate installation");
    dir = up;
  }
  return dir;
}

let cached: Promise<UsdcArtifact> | undefined;

export function usdcArtifact(): Promise<UsdcArtifact> {
  cached ??= compile().catch((err: unknown) => {
    cached = undefined;
    throw err;
  });
  return cached;
}

async function compile(): Promise<UsdcArtifact> {
  const root = repositoryRoot();
  const source = await readFile(join(root, "contracts", "USDC.sol"), "utf8");
  const require = createRequire(import.meta.url);
  const solcVersion = (require("solc/package.json") as { version: string }).version;
  const key = createHash("sha256").update(solcVersion).update("\0").update(source).digest("hex").slice(0, 16);
  const dir = join(root, ".cache", "contracts");
  const file = join(dir, `USDC-${key}.json`);
  try {
    return JSON.parse(await readFile(file, "utf8")) as UsdcArtifact;
  } catch {
    // not cached yet
  }
  const solc = require("solc") as { compile(input: string): string };
  const input = {
    language: "Solidity",
    sources: { "USDC.sol": { content: source } },
    settings: { optimizer: { enabled: true, runs: 200 }, evmVersion: "paris", outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } } },
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input))) as {
    errors?: { severity: string; formattedMessage: string }[];
    contracts?: Record<string, Record<string, { abi: Abi; evm: { bytecode: { object: string } } }>>;
  };
  const errors = (output.errors ?? []).filter((e) => e.severity === "error");
  if (errors.length > 0) throw new Error(`contracts/USDC.sol does not compile: ${errors.map((e) => e.formattedMessage).join("\n")}`);
  const contract = output.contracts!["USDC.sol"]!.USDC!;
  const artifact: UsdcArtifact = { abi: contract.abi, bytecode: `0x${contract.evm.bytecode.object}` };
  await mkdir(dir, { recursive: true });
  // Written aside and renamed: a concurrent compile never reads half a file.
  const tmp = `${file}.${process.pid}.tmp`;
  await writeFile(tmp, JSON.stringify(artifact));
  await rename(tmp, file);
  return artifact;
}
