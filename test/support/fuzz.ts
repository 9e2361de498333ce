/** What a browser or URL encoder can send: a lone surrogate becomes U+FFFD. */
export const wellFormed = (s: string) => s.replace(/\p{Cs}/gu, "\ufffd");
