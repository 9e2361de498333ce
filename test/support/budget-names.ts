/** Names someone else's terminal, mail client or page would act on, or show as nothing at all. */
export const HOSTILE_NAMES: readonly [string, RegExp][] = [
  ["a\u0007b", /control characters/],
  ["\u001b[31mred", /control characters/],
  ["line\nbreak", /control characters/],
  ["tab\there", /control characters/],
  ["del\u007f", /control characters/],
  ["c1 \u009b31m", /control characters/],
  [" ", /blank/],
  ["\u00a0\u3000\u2028", /blank/],
];

/** Names that pass: spaces inside, letters of any script, emoji, a bidi isolate (pages isolate names anyway). */
export const FINE_NAMES: readonly string[] = [" Trip to Lisbon ", "Réunion 東京 \u{1F600}", "a\u2068b\u2069", "\u{1F600}".repeat(100)];
