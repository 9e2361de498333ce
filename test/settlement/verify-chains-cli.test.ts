import { readFile } from "node:fs/promises";
import { expect } from "chai";
import type { Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { createEvmRail } from "../../core/settlement/evm-rail.js";
import type { Anvil } from "../support/anvil.js";
import { createScratchDatabase } from "../support/db.js";
import { evmChainSettings, evmRailServiceEnv, fundHotWallet, sendOutsideVaultgate, startAnvilWithUsdc } from "../support/evm-rail.js";
import { runCli, startServiceProcess, tempDataDir, type ServiceProcess } from "../support/process.js";
import { walletKeyPath } from "../../core/settlement/wallet.js";

/** `vaultgate ledger verify --chains` against a running `vaultgate serve` on anvil. */
describe("vaultgate ledger verify --chains (real processes)", function () {
  this.timeout(180_000);
  let anvil: Anvil;
  let usdc: Hex;
  let dir: Awaited<ReturnType<typeof tempDataDir>>;
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  let service: ServiceProcess | undefined;

  before(async () => {
    ({ anvil, usdc } = await startAnvilWithUsdc());
    dir = await tempDataDir();
    scratch = await createScratchDatabase();
  });
  after(async () => {
    await service?.stop();
    await scratch?.drop();
    await dir?.remove();
    await anvil?.stop();
  });

  it("exits 0 on a freshly funded wallet, then 1 naming a transfer sent outside Vaultgate", async () => {
    const env = evmRailServiceEnv(dir.path, scratch, anvil.url, usdc);
    service = await startServiceProcess("core", env);
    const cli = { ...env, CORE_URL: service.coreUrl! };
    const account = privateKeyToAccount((await readFile(walletKeyPath(dir.path, "base"), "utf8")).trim() as Hex);
    await fundHotWallet(anvil, usdc, account.address, 5_000_000n);

    const clean = await runCli(["ledger", "verify", "--chains", "--json"], cli);
    expect(clean.code, clean.stderr).to.equal(0);
    expect((clean.json!.chains as Record<string, unknown>[])[0]).to.include({
      chain: "base",
      wallet: account.address.toLowerCase(),
      onchain_balance_units: "5000000",
    });
    expect(clean.json!.chain_differences).to.deep.equal([]);

    const rail = createEvmRail(evmChainSettings(anvil.url, usdc, { confirmations: 1, finalityBlocks: 64 }), account);
    const txHash = await sendOutsideVaultgate(anvil, rail, 1_000_000n);

    const damaged = await runCli(["ledger", "verify", "--chains", "--json"], cli);
    expect(damaged.code).to.equal(1);
    expect(damaged.stderr).to.include(txHash);
    const diffs = (JSON.parse(damaged.stdout) as { chain_differences: Record<string, unknown>[] }).chain_differences;
    expect(diffs).to.deep.include({
      chain: "base",
      check: "transfer_without_payment",
      tx_hash: txHash,
      payment_id: null,
      chain_units: "1000000",
      books_units: "0",
      message: diffs.find((d) => d.check === "transfer_without_payment")!.message,
    });

    // From the block after that send, for this run only: nothing before it is compared.
    const after = Number(await anvil.client.getBlockNumber({ cacheTime: 0 })) + 1;
    await anvil.mine(1);
    const later = await runCli(["ledger", "verify", "--chains", "--from-block", `base=${after}`, "--json"], cli);
    expect(later.code, later.stderr).to.equal(0);
    expect((later.json!.chains as Record<string, unknown>[])[0]).to.include({ chain: "base", from_block: after, opening_balance_units: "4000000" });
    for (const args of [
      ["--chains", "--from-block", "base=-1"],
      ["--chains", "--from-block", "base=1,base=2"],
      ["--chains", "--from-block", "1,base=2"],
      ["--from-block", "1"],
    ]) {
      const bad = await runCli(["ledger", "verify", ...args], cli);
      expect(bad.code, args.join(" ")).to.equal(2);
      expect(bad.stderr).to.include("--from-block");
    }
  });
});
