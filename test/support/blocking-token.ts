import { createRequire } from "node:module";
import { createWalletClient, http, type Abi, type Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { ANVIL_DEPLOYER_KEY, anvilChain } from "../../cli/local-chain.js";
import type { Anvil } from "./anvil.js";

/** A USDC-shaped token that refuses transfers to the payees it blocks, as Circle's USDC does to blacklisted addresses. */
const SOURCE = `// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;
contract BlockingUSDC {
    uint8 public constant decimals = 6;
    mapping(address => uint256) public balanceOf;
    mapping(address => bool) public blocked;
    event Transfer(address indexed from, address indexed to, uint256 value);
    function mint(address to, uint256 value) external { balanceOf[to] += value; emit Transfer(address(0), to, value); }
    function blockPayee(address who) external { blocked[who] = true; }
    function transfer(address to, uint256 value) external returns (bool) {
        require(!blocked[to], "blocked payee");
        require(balanceOf[msg.sender] >= value, "balance");
        balanceOf[msg.sender] -= value;
        balanceOf[to] += value;
        emit Transfer(msg.sender, to, value);
        return true;
    }
}`;

export interface BlockingToken {
  address: Hex;
  mint(to: string, units: bigint): Promise<void>;
  blockPayee(who: string): Promise<void>;
}

/** Compiles (solc-js) and deploys the blocking token on `anvil`. */
export async function deployBlockingToken(anvil: Anvil): Promise<BlockingToken> {
  const solc = createRequire(import.meta.url)("solc") as { compile(input: string): string };
  const input = {
    language: "Solidity",
    sources: { "BlockingUSDC.sol": { content: SOURCE } },
    settings: { evmVersion: "paris", outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } } },
  };
  const output = JSON.parse(solc.compile(JSON.stringify(input))) as {
    contracts: Record<string, Record<string, { abi: Abi; evm: { bytecode: { object: string } } }>>;
  };
  const { abi, evm } = output.contracts["BlockingUSDC.sol"]!.BlockingUSDC!;
  const wallet = createWalletClient({ account: privateKeyToAccount(ANVIL_DEPLOYER_KEY), transport: http(anvil.url) });
  const chain = anvilChain(anvil.url);
  const mined = async (hash: Hex) => {
    await anvil.mine(1).catch(() => {});
    return anvil.client.waitForTransactionReceipt({ hash, pollingInterval: 20 });
  };
  const address = (await mined(await wallet.deployContract({ abi, bytecode: `0x${evm.bytecode.object}`, chain }))).contractAddress!;
  const write = async (functionName: string, args: unknown[]) => {
    await mined(await wallet.writeContract({ address, abi, functionName, args, chain }));
  };
  return {
    address,
    mint: (to, units) => write("mint", [to, units]),
    blockPayee: (who) => write("blockPayee", [who]),
  };
}
