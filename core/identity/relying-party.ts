/*
 * The passkey relying party's rules, apart from the passkey library: the CLI checks its
 * settings with them and must not load that library to do so.
 */
import { isIP } from "node:net";

/** True when a passkey made for `rpId` can be used on `host`: the same host, or one under it. */
export function rpIdCovers(rpId: string, host: string): boolean {
  return host === rpId || host.endsWith(`.${rpId}`);
}

/** The relying party of an APP_URL: its origin, and its host as RP ID. */
export function relyingParty(appUrl: string): { origin: string; rpId: string } {
  const url = new URL(appUrl);
  return { origin: url.origin, rpId: url.hostname };
}

/** Why browsers would never run a passkey ceremony on the page at `url` (`name` its setting), or undefined. */
export function passkeyPageProblem(name: string, url: string): string | undefined {
  const { protocol, hostname } = new URL(url);
  const bare = hostname.replace(/^\[|\]$/g, "");
  if (isIP(bare) !== 0) return `${name}'s host ${hostname} is an IP address, which browsers never take as a passkey's relying party`;
  const local = bare === "localhost" || bare.endsWith(".localhost");
  if (protocol !== "https:" && !local) return `${name} is plain http on ${hostname}, and browsers offer passkeys only to https pages (and http://localhost)`;
  return undefined;
}
