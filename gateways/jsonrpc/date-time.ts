/**
 * Our date-time: a valid calendar date (leap years honoured), `T`, `HH:MM` with
 * optional `:SS` and an optional fraction of any length after the seconds, and a mandatory `Z`.
 */
export const DATE_TIME_SHAPE = /^(\d{4})-(\d{2})-(\d{2})T([01]\d|2[0-3]):([0-5]\d)(?::([0-5]\d)(\.\d+)?)?Z$/;

const DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

function isLeap(year: number): boolean {
  return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
}

/** The instant such a date-time names (fractions beyond milliseconds are dropped), or undefined. */
export function parseDateTime(value: string): Date | undefined {
  const m = DATE_TIME_SHAPE.exec(value);
  if (!m) return undefined;
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
  if (month < 1 || month > 12 || day < 1) return undefined;
  const max = month === 2 && isLeap(year) ? 29 : DAYS[month - 1]!;
  if (day > max) return undefined;
  const millis = m[7] ? Number(m[7].slice(1, 4).padEnd(3, "0")) : 0;
  const d = new Date(0);
  d.setUTCFullYear(year, month - 1, day);
  d.setUTCHours(Number(m[4]), Number(m[5]), m[6] ? Number(m[6]) : 0, millis);
  return d;
}

export function isDateTime(value: string): boolean {
  return parseDateTime(value) !== undefined;
}
