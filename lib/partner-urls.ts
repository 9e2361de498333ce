/**
 * How a partner's URL (a webhook, a KYC redirect) must be written: `https://` with no
 * `user@` in the authority, or `http://` to 127.0.0.1, localhost or [::1] only. The OpenAPI
 * document publishes this pattern and core checks the same text, so they cannot disagree.
 */
export const PARTNER_URL_PATTERN = String.raw`^(?:[Hh][Tt][Tt][Pp][Ss]://[^/?#@\\]+|[Hh][Tt][Tt][Pp]://(?:127\.0\.0\.1|[Ll][Oo][Cc][Aa][Ll][Hh][Oo][Ss][Tt]|\[::1\])(?::[0-9]{0,5})?)(?:[/?#]|$)`;

const PARTNER_URL = new RegExp(PARTNER_URL_PATTERN, "u");

export function isPartnerUrlSpelling(value: string): boolean {
  return PARTNER_URL.test(value);
}
