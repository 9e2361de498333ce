import { randomBytes } from "node:crypto";
import { getAddress } from "viem";
import { mkdtemp, readFile, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { parseSettlementSettings, SettlementConfigError } from "../../core/settlement/config.js";
import { centsToUnits, evmAddressProblem, tokenSupported } from "../../core/settlement/rules.js";
import { loadHotWallet, walletKeyPath } from "../../core/settlement/wallet.js";
import { thrownNow } from "../support/refusals.js";

const USDC = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"; // mainnet USDC, checksummed

describe("settlement rules", () => {
  it("one cent is 10,000 USDC base units", () => {
    expect(centsToUnits(1)).to.equal(10_000n);
    expect(centsToUnits(123_456)).to.equal(1_234_560_000n);
  });

  it("EVM addresses: 0x and 40 hex digits; mixed case must carry a valid EIP-55 checksum", () => {
    expect(evmAddressProblem(USDC)).to.equal(undefined);
    expect(evmAddressProblem(USDC.toLowerCase())).to.equal(undefined);
    expect(evmAddressProblem(`0x${USDC.slice(2).toUpperCase()}`)).to.equal(undefined);
    expect(evmAddressProblem("0xa0B86991c6218b36c1d19D4a2e9Eb0cE3606eB48")).to.match(/checksum/);
    expect(evmAddressProblem("0x1234")).to.match(/40 hexadecimal/);
    expect(evmAddressProblem(`0x${"0".repeat(40)}`)).to.match(/zero address/);
    expect(evmAddressProblem(`${USDC} `)).to.match(/40 hexadecimal/);
    expect(evmAddressProblem("A0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48")).to.match(/40 hexadecimal/);
  });

  it("EIP-55 as viem computes it: 500 random addresses checksummed by viem pass, each with one letter's case flipped fails", () => {
    for (let i = 0; i < 500; i++) {
      const good = getAddress(`0x${randomBytes(20).toString("hex")}`);
      expect(evmAddressProblem(good), good).to.equal(undefined);
      const at = [...good.slice(2)].findIndex((c) => /[a-fA-F]/.test(c));
      if (at < 0) continue;
      const c = good[at + 2]!;
      const flipped = good.slice(0, at + 2) + (c === c.toUpperCase() ? c.toLowerCase() : c.toUpperCase()) + good.slice(at + 3);
      if (flipped.slice(2) === flipped.slice(2).toLowerCase() || flipped.slice(2) === flipped.slice(2).toUpperCase()) continue;
      expect(evmAddressProblem(flipped), flipped).to.match(/checksum/);
    }
  });

  it("the evm rail pays only USDC; the sandbox rail takes any allowed token", () => {
    expect(tokenSupported("evm", "USDC")).to.equal(true);
    expect(tokenSupported("evm", "USDT")).to.equal(false);
    expect(tokenSupported("sandbox", "USDT")).to.equal(true);
  });
});

describe("settlement settings", () => {
  const evm = (extra: Record<string, string>) => ({ CHAIN_BASE_RAIL: "evm", CHAIN_BASE_RPC_URL: "http://127.0.0.1:8545", CHAIN_BASE_USDC: USDC, ...extra });
  const refused = (env: Record<string, string>) => {
    const err = thrownNow(() => parseSettlementSettings(env));
    expect(err).to.be.instanceOf(SettlementConfigError);
    return (err as Error).message;
  };

  it("every chain is on the sandbox rail unless configured otherwise", () => {
    expect(parseSettlementSettings({}).evm).to.deep.equal([]);
  });

  it("an evm chain takes its URL, contract, chain id and depth", () => {
    const [base] = parseSettlementSettings(evm({ CHAIN_BASE_CHAIN_ID: "31337", CHAIN_BASE_CONFIRMATIONS: "3" })).evm;
    expect(base).to.include({ chain: "base", rail: "evm", chainId: 31337, confirmations: 3, usdc: USDC });
    expect(parseSettlementSettings(evm({})).evm[0]!.chainId).to.equal(8453);
    expect(parseSettlementSettings(evm({})).evm[0]!.startBlock).to.equal(0);
    expect(parseSettlementSettings(evm({ CHAIN_BASE_START_BLOCK: "21000000" })).evm[0]!.startBlock).to.equal(21_000_000);
    expect(parseSettlementSettings(evm({})).evm[0]!.maxFeePerGas, "no cap unless set").to.equal(undefined);
    expect(parseSettlementSettings(evm({ CHAIN_BASE_MAX_FEE_GWEI: "50" })).evm[0]!.maxFeePerGas).to.equal(50_000_000_000n);
    expect(parseSettlementSettings(evm({ CHAIN_BASE_MAX_FEE_GWEI: "0.05" })).evm[0]!.maxFeePerGas).to.equal(50_000_000n);
    expect(parseSettlementSettings(evm({})).evm[0]!.retiredWallets).to.deep.equal([]);
    const retired = parseSettlementSettings(evm({ CHAIN_BASE_RETIRED_WALLETS: ` ${USDC}, ${USDC.toLowerCase()},0x${"ab".repeat(20)} ` }));
    expect(retired.evm[0]!.retiredWallets, "lower case, each once").to.deep.equal([USDC.toLowerCase(), `0x${"ab".repeat(20)}`]);
  });

  it("a misconfigured chain refuses the start naming the setting", () => {
    expect(refused(evm({ CHAIN_BASE_RPC_URL: "" }))).to.match(/^CHAIN_BASE_RPC_URL is required/);
    expect(refused(evm({ CHAIN_BASE_RPC_URL: "ftp://x" }))).to.match(/^CHAIN_BASE_RPC_URL must be an http/);
    expect(refused(evm({ CHAIN_BASE_USDC: "0x1234" }))).to.match(/^CHAIN_BASE_USDC must be 0x/);
    expect(refused(evm({ CHAIN_BASE_USDC: "0xa0B86991c6218b36c1d19D4a2e9Eb0cE3606eB48" }))).to.match(/^CHAIN_BASE_USDC fails its EIP-55 checksum/);
    expect(refused(evm({ CHAIN_BASE_CONFIRMATIONS: "0" }))).to.match(/^CHAIN_BASE_CONFIRMATIONS must be/);
    expect(refused(evm({ CHAIN_BASE_CHAIN_ID: "x" }))).to.match(/^CHAIN_BASE_CHAIN_ID must be/);
    for (const bad of ["-1", "1e6", "0x10", " 5", "9007199254740992"]) {
      expect(refused(evm({ CHAIN_BASE_START_BLOCK: bad }))).to.match(/^CHAIN_BASE_START_BLOCK must be a whole number from 0/);
    }
    for (const bad of ["0", "0.0", "-5", "5 gwei", "1e3", "0.0000000001", "99999999", ".5"]) {
      expect(refused(evm({ CHAIN_BASE_MAX_FEE_GWEI: bad })), bad).to.match(/^CHAIN_BASE_MAX_FEE_GWEI must be a number of gwei above 0/);
    }
    expect(refused(evm({ CHAIN_BASE_RETIRED_WALLETS: `${USDC},0x1234` }))).to.equal(
      "CHAIN_BASE_RETIRED_WALLETS: 0x1234 must be 0x followed by 40 hexadecimal digits",
    );
    expect(refused(evm({ CHAIN_BASE_RETIRED_WALLETS: "0xa0B86991c6218b36c1d19D4a2e9Eb0cE3606eB48" }))).to.match(
      /^CHAIN_BASE_RETIRED_WALLETS: 0x\S+ fails its EIP-55/,
    );
    const many = Array.from({ length: 33 }, (_, i) => `0x${i.toString(16).padStart(40, "1")}`).join(",");
    expect(refused(evm({ CHAIN_BASE_RETIRED_WALLETS: many }))).to.equal("CHAIN_BASE_RETIRED_WALLETS lists 33 addresses; at most 32");
    expect(refused({ CHAIN_ETH_RAIL: "lightning" })).to.match(/^CHAIN_ETH_RAIL must be sandbox or evm/);
    expect(refused({ CHAIN_SOL_RAIL: "evm" })).to.match(/^CHAIN_SOL_RAIL must be sandbox/);
  });
});

describe("hot wallet key", () => {
  it("is generated once into a 0600 file in DATA_DIR and read back after", async () => {
    const dir = await mkdtemp(join(tmpdir(), "vg-wallet-"));
    const a = await loadHotWallet({ chain: "eth", dataDir: dir });
    const b = await loadHotWallet({ chain: "eth", dataDir: dir });
    expect(b.address).to.equal(a.address);
    expect((await stat(walletKeyPath(dir, "eth"))).mode & 0o777).to.equal(0o600);
    expect((await loadHotWallet({ chain: "base", dataDir: dir })).address).to.not.equal(a.address);
  });

  it("an operator's key file is used as given; a bad one refuses the start naming the setting", async () => {
    const dir = await mkdtemp(join(tmpdir(), "vg-wallet-"));
    const file = join(dir, "op.key");
    await writeFile(file, "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80\n", { mode: 0o600 });
    expect((await loadHotWallet({ chain: "eth", keyFile: file })).address).to.equal("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266");
    await writeFile(file, "not a key");
    let message = "";
    await loadHotWallet({ chain: "eth", keyFile: file }).catch((err: Error) => (message = err.message));
    expect(message).to.include("CHAIN_ETH_WALLET_KEY_FILE");
    expect(message).to.not.include("not a key");
    expect(await readFile(file, "utf8")).to.equal("not a key");
  });
});
