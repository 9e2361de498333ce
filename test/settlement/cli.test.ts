import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { expect } from "chai";
import { privateKeyToAccount } from "viem/accounts";
import { freePort } from "../support/ports.js";
import { runCli } from "../support/process.js";
import { useScratchEnv } from "../support/scratch-env.js";

const bin = fileURLToPath(new URL("../../bin/vaultgate.mjs", import.meta.url));

describe("vaultgate dev chain and wallet commands", function () {
  this.timeout(120_000);
  const scratch = useScratchEnv();

  it("dev chain prints settings that make the funded hot wallets readable; wallet address and balance agree", async () => {
    const port = await freePort();
    const child = spawn(process.execPath, [bin, "dev", "chain", "--port", String(port), "--format", "env"], {
      env: { ...process.env, DATA_DIR: scratch.dir },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    try {
      let out = "";
      let err = "";
      child.stderr!.on("data", (c: Buffer) => (err += c.toString()));
      await new Promise<void>((resolve, reject) => {
        child.stdout!.on("data", (c: Buffer) => {
          out += c.toString();
          if (out.includes("CHAIN_BASE_FINALITY_BLOCKS=")) resolve();
        });
        void exited.then((code) => reject(new Error(`dev chain exited ${code}: ${err}`)));
      });
      const env: Record<string, string> = { DATA_DIR: scratch.dir };
      for (const line of out.trim().split("\n")) {
        const m = /^([A-Z_]+)=(.*)$/.exec(line);
        expect(m, line).to.not.equal(null);
        env[m![1]!] = m![2]!;
      }
      expect(env.CHAIN_ETH_RAIL).to.equal("evm");
      expect(env.CHAIN_BASE_RPC_URL).to.equal(`http://127.0.0.1:${port}`);
      const address = await runCli(["wallet", "address", "--chain", "base"], env);
      expect(address.code, address.stderr).to.equal(0);
      expect(address.json).to.include({ chain: "base", rail: "evm" });
      const balance = await runCli(["wallet", "balance", "--chain", "base"], env);
      expect(balance.code, balance.stderr).to.equal(0);
      expect(balance.json).to.include({ address: address.json!.address, balance_usdc: "1000000.000000" });
      const eth = await runCli(["wallet", "address", "--chain", "eth"], env);
      expect(eth.json!.address).to.not.equal(address.json!.address);
      const sol = await runCli(["wallet", "address", "--chain", "sol"], env);
      expect(sol.code).to.equal(2);
      expect(sol.stderr).to.include("sandbox rail");
    } finally {
      child.kill("SIGINT");
      expect(await exited).to.equal(0);
    }
  });

  it("wallet balance on a chain left on the sandbox rail says how to put it on the evm rail: a setting, so exit 1", async () => {
    const r = await runCli(["wallet", "balance", "--chain", "arb"], { DATA_DIR: scratch.dir });
    expect(r.code).to.equal(1);
    expect(r.stderr).to.include("CHAIN_ARB_RAIL=evm");
    // Only a usage error points at the help.
    expect(r.stderr).to.not.include("--help");
  });

  it("a chain's settings without its CHAIN_<NAME>_RAIL stop the CLI and serve naming the setting, not a silent sandbox rail", async () => {
    const keyFile = `${scratch.dir}/base.key`;
    await writeFile(keyFile, `0x${"ab".repeat(32)}\n`, { mode: 0o600 });
    const usdc = "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913";
    const base = scratch.env;
    for (const [env, named] of [
      [{ CHAIN_BASE_WALLET_KEY_FILE: keyFile }, "CHAIN_BASE_WALLET_KEY_FILE"],
      [{ CHAIN_BASE_RPC_URL: "http://127.0.0.1:9", CHAIN_BASE_USDC: usdc }, "CHAIN_BASE_RPC_URL"],
    ] as const) {
      // The wallet command first: before this was refused, serve would have started on the sandbox rail.
      for (const args of [["wallet", "address", "--chain", "base"], ["serve"]]) {
        const res = await runCli(args, { ...base, ...env });
        expect(res.code, res.stderr).to.equal(1);
        expect(res.stderr).to.equal(
          `vaultgate: ${named} is set but CHAIN_BASE_RAIL is not: set CHAIN_BASE_RAIL=evm to settle base on chain, or CHAIN_BASE_RAIL=sandbox to keep the sandbox rail\n`,
        );
      }
    }
    // Said explicitly, the sandbox rail stays and the other settings wait unused; the address is the key
    // file's, the one serve pays from once the chain is on the evm rail (not DATA_DIR's own key).
    await writeFile(`${scratch.dir}/settlement-wallet-base.key`, `0x${"cd".repeat(32)}\n`, { mode: 0o600 });
    const kept = await runCli(["wallet", "address", "--chain", "base"], { ...base, CHAIN_BASE_RAIL: "sandbox", CHAIN_BASE_WALLET_KEY_FILE: keyFile });
    expect(kept.code, kept.stderr).to.equal(0);
    expect(kept.json).to.deep.equal({ chain: "base", rail: "sandbox", address: privateKeyToAccount(`0x${"ab".repeat(32)}`).address });
    const own = await runCli(["wallet", "address", "--chain", "base"], { ...base, CHAIN_BASE_RAIL: "sandbox" });
    expect(own.json).to.deep.equal({ chain: "base", rail: "sandbox", address: privateKeyToAccount(`0x${"cd".repeat(32)}`).address });
  });

  it("wallet address and balance never make a key: a DATA_DIR without one is refused, naming it and how a key is made", async () => {
    const missing = `${scratch.dir}/missing`;
    const rpc = { CHAIN_BASE_RAIL: "evm", CHAIN_BASE_RPC_URL: "http://127.0.0.1:9", CHAIN_BASE_USDC: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913" };
    for (const dataDir of [scratch.dir, missing]) {
      for (const [args, env] of [
        [["wallet", "address", "--chain", "base"], {}],
        [["wallet", "address", "--chain", "base"], rpc],
        [["wallet", "balance", "--chain", "base"], rpc],
      ] as const) {
        const res = await runCli([...args], { DATA_DIR: dataDir, ...env });
        expect([res.code, res.stdout, res.stderr], args.join(" ")).to.deep.equal([
          1,
          "",
          `vaultgate: no hot-wallet key for base found in DATA_DIR (${dataDir}): 'vaultgate serve' makes one there on start when CHAIN_BASE_RAIL=evm ('vaultgate dev chain' for eth and base), or set CHAIN_BASE_WALLET_KEY_FILE to your key file; run this with the DATA_DIR the service uses\n`,
        ]);
      }
    }
    expect(await readdir(scratch.dir), "nothing was made").to.deep.equal([]);
    // The key serve would make is the one read.
    await writeFile(`${scratch.dir}/settlement-wallet-base.key`, `0x${"ab".repeat(32)}\n`, { mode: 0o600 });
    const found = await runCli(["wallet", "address", "--chain", "base"], { DATA_DIR: scratch.dir, ...rpc });
    expect([found.code, found.json?.address]).to.deep.equal([0, privateKeyToAccount(`0x${"ab".repeat(32)}`).address]);
  });

  it("serve and the wallet commands refuse a key file without a key alike, naming the file and the setting", async () => {
    const rpc = { CHAIN_BASE_RAIL: "evm", CHAIN_BASE_RPC_URL: "http://127.0.0.1:9", CHAIN_BASE_USDC: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913" };
    const env = { ...scratch.env, ...rpc };
    const dataDirKey = `${scratch.dir}/settlement-wallet-base.key`;
    const operatorKey = `${scratch.dir}/operator.key`;
    await writeFile(dataDirKey, "not a key\n", { mode: 0o600 });
    await writeFile(operatorKey, "0x1234\n", { mode: 0o600 });
    for (const [extra, message] of [
      [{}, `${dataDirKey} does not hold a private key; restore it or set CHAIN_BASE_WALLET_KEY_FILE`],
      [{ CHAIN_BASE_WALLET_KEY_FILE: operatorKey }, `${operatorKey} (CHAIN_BASE_WALLET_KEY_FILE) must hold a private key: 0x and 64 hexadecimal digits`],
      [{ CHAIN_BASE_WALLET_KEY_FILE: `${scratch.dir}/gone.key` }, `CHAIN_BASE_WALLET_KEY_FILE names ${scratch.dir}/gone.key, which does not exist`],
    ] as const) {
      for (const args of [["wallet", "address", "--chain", "base"], ["wallet", "balance", "--chain", "base"], ["serve"]]) {
        const res = await runCli(args, { ...env, ...extra });
        expect([res.code, res.stderr], args.join(" ")).to.deep.equal([1, `vaultgate: ${message}\n`]);
      }
    }
    expect(await readFile(dataDirKey, "utf8"), "the bad key is left for the operator to restore").to.equal("not a key\n");
    expect(existsSync(`${scratch.dir}/pgdata`), "serve refused before it made or migrated a database").to.equal(false);
  });
});
