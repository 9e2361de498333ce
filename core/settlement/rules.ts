import { CHAINS, type Chain } from "../../lib/vocabulary.js";
import { keccak_256 } from "@noble/hashes/sha3";

/**
 * The rules the payments code applies to a counterparty on a settling chain, as pure
 * functions: amounts, EVM addresses, and which token a rail pays in.
 */

/** USDC has 6 decimals: one cent is 10,000 base units. */
export const UNITS_PER_CENT = 10_000n;

export function centsToUnits(cents: number | bigint): bigint {
  return BigInt(cents) * UNITS_PER_CENT;
}

/** USDC as a decimal string ("12.345678"), for people and metrics. */
export function formatUsdc(units: bigint): string {
  const sign = units < 0n ? "-" : "";
  const abs = units < 0n ? -units : units;
  return `${sign}${abs / 1_000_000n}.${(abs % 1_000_000n).toString().padStart(6, "0")}`;
}

/** The chains an operator can put on the evm rail; `sol` stays on the sandbox rail. */
export type EvmChain = Exclude<Chain, "sol">;
export const EVM_CHAINS: readonly EvmChain[] = CHAINS.filter((c): c is EvmChain => c !== "sol");
export const isEvmChain = (chain: string): chain is EvmChain => (EVM_CHAINS as readonly string[]).includes(chain);

export type RailKind = "sandbox" | "evm";

/** EIP-55: a hex letter is upper case where the Keccak-256 of the lower-case address has a nibble of 8 or more. */
function eip55(hex40: string): string {
  const lower = hex40.toLowerCase();
  const hash = keccak_256(new TextEncoder().encode(lower));
  let out = "";
  for (let i = 0; i < 40; i++) out += ((hash[i >> 1]! >> (i % 2 ? 0 : 4)) & 0xf) >= 8 ? lower[i]!.toUpperCase() : lower[i]!;
  return out;
}

/**
 * Why an EVM address is refused, or undefined when it is good: 0x and 40 hex digits, not all zero;
 * an address in mixed case carries an EIP-55 checksum, which must hold (all lower or all
 * upper case carries none).
 */
export function evmAddressProblem(address: string): string | undefined {
  if (!/^0x[0-9a-fA-F]{40}$/.test(address)) return "must be 0x followed by 40 hexadecimal digits";
  // USDC reverts a transfer to it: accepted, it would only spend the hot wallet's gas before its refund.
  if (/^0x0{40}$/.test(address)) return "is the zero address, which USDC never pays";
  const body = address.slice(2);
  if (body === body.toLowerCase() || body === body.toUpperCase()) return undefined;
  return eip55(body) === body ? undefined : "fails its EIP-55 checksum (mixed-case letters must match it)";
}

/** The token a rail pays in: the evm rail pays only USDC; the sandbox rail takes any allowed token. */
export function tokenSupported(rail: RailKind, token: string): boolean {
  return rail === "sandbox" || token === "USDC";
}
