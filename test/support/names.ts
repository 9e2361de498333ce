/** Names that read other than as stored: reordered by bidi controls ("Evil" spelled to read as a trusted name) or broken onto lines. */
export const SPOOFING_NAMES: readonly [string, RegExp][] = [
  ["\u202eliveE", /bidirectional controls/],
  ["Pay\u202a roll\u202c", /bidirectional controls/],
  ["Trip \u202b\u202d", /bidirectional controls/],
  ["a\u2066b\u2069", /bidirectional controls/],
  ["a\u2067b\u2068c", /bidirectional controls/],
  ["left\u200emark", /bidirectional controls/],
  ["right\u200fmark", /bidirectional controls/],
  ["arabic\u061cmark", /bidirectional controls/],
  ["line\u2028separator", /separators/],
  ["para\u2029separator", /separators/],
  ["Trusted\u2029", /separators/],
  ["\u00a0\u3000\u2028", /separators/],
];

/** Names someone else's terminal, mail client or page would act on, or show as nothing at all. */
export const HOSTILE_NAMES: readonly [string, RegExp][] = [
  ["a\u0007b", /control characters/],
  ["\u001b[31mred", /control characters/],
  ["line\nbreak", /control characters/],
  ["tab\there", /control characters/],
  ["del\u007f", /control characters/],
  ["c1 \u009b31m", /control characters/],
  [" ", /blank/],
  ["\u00a0\u3000", /blank/],
  ...SPOOFING_NAMES,
];

/** Names that pass: spaces inside, letters of any script (right-to-left ones too), emoji with joiners, 100 characters. */
export const FINE_NAMES: readonly string[] = [
  " Trip to Lisbon ",
  "Réunion 東京 \u{1F600}",
  "رحلة إلى دبي",
  "טיול לתל אביב",
  "出張 北京 2026",
  "Family \u{1F468}\u200d\u{1F469}\u200d\u{1F467} budget",
  "\u{1F600}".repeat(100),
];
