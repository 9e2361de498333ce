/*
 * The passkey relying party's rules, apart from the passkey library: the CLI checks its
 * settings with them and must not load that library to do so.
 */

/** True when a passkey made for `rpId` can be used on `host`: the same host, or one under it. */
export function rpIdCovers(rpId: string, host: string): boolean {
  return host === rpId || host.endsWith(`.${rpId}`);
}

/** The relying party of an APP_URL: its origin, and its host as RP ID. */
export function relyingParty(appUrl: string): { origin: string; rpId: string } {
  const url = new URL(appUrl);
  return { origin: url.origin, rpId: url.hostname };
}
