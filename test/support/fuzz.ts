/** What a browser or URL encoder can send: a lone surrogate becomes U+FFFD. */
export const wellFormed = (s: string) => s.replace(/\p{Cs}/gu, "\ufffd");

/** Runs per property and the seed: fixed in CI; FUZZ_RUNS and FUZZ_SEED explore further. */
export const FUZZ = { runs: Number(process.env.FUZZ_RUNS ?? 60), seed: Number(process.env.FUZZ_SEED ?? 20261204) };
