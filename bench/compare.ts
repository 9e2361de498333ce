/** Comparisons in alternating rounds, each round printed with the machine's load. */
import { comparisonRounds, fmt, median, ROUNDS, table } from "./basics.js";
import { watchPostgres } from "./bench-postgres.js";
import type { Measurement } from "./load.js";
import { DISTURBED_CORES, type Load } from "./machine-load.js";
import { loadColumns, watchLoad } from "./machine-watch.js";

/**
 * What every measured round records besides its own numbers: the machine's load
 * (watchLoad) and PostgreSQL's own background work (watchPostgres). `start()` before
 * the measurement; the function it returns after it.
 */
export async function watchRounds(): Promise<{
  start(): Promise<() => Promise<{ load: Load; background: string; walBytes?: number }>>;
  close(): Promise<void>;
}> {
  const pgWatch = await watchPostgres();
  return {
    async start() {
      const stopPostgres = await pgWatch?.start();
      const stopLoad = watchLoad();
      return async () => {
        const load = stopLoad();
        return { load, ...(stopPostgres ? await stopPostgres() : { background: "" }) };
      };
    },
    close: async () => pgWatch?.close(),
  };
}

// ---------------------------------------------------------------------------------------
// Alternating comparisons

export interface Side {
  name: string;
  /** One measurement (a `load`, or anything measured the same way). */
  measure(round: number): Promise<Measurement>;
}

export interface SideResult {
  name: string;
  /**
   * `background`: PostgreSQL's own work seen during the measurement ("checkpoint",
   * "autovacuum"), or ""; `walBytes`: the WAL written meanwhile (with a bench PostgreSQL).
   */
  rounds: (Measurement & { load: Load; background: string; walBytes?: number })[];
  rps: number;
  p50: number;
  p99: number;
  failures: number;
}

export interface Alternation {
  title: string;
  sides: SideResult[];
  /** Per round: the first side's req/s over the second's. */
  ratios: number[];
  /** Median of `ratios`. */
  ratio: number;
  failures: number;
  disturbed: number;
  /** Measurements during which PostgreSQL checkpointed or vacuumed (printed, not judged). */
  background: number;
}

/** Per round: `a`'s req/s over `b`'s (the ratios an Alternation is judged by). */
export function roundRatios(a: SideResult, b: SideResult): number[] {
  return a.rounds.map((x, i) => x.rps / b.rounds[i]!.rps);
}

/** Bytes of WAL per answered request, or undefined when either is unknown. */
const walPerRequest = (walBytes: number | undefined, requests: number) => (walBytes === undefined || requests === 0 ? undefined : walBytes / requests);

/** Whole bytes, or "-" when there are none. */
const bytes = (n: number | undefined) => (n === undefined ? "-" : fmt(n, 0));

/** A share (0.17) as a whole percentage ("17%"), or "-" when there is none. */
const percent = (share: number | undefined) => (share === undefined ? "-" : `${fmt(100 * share, 0)}%`);

/** One measurement of `inTurns`, with the machine's load while it ran. */
export interface Turn<S, M> {
  side: S;
  /** The side's index in the list given. */
  index: number;
  /** 1-based. */
  round: number;
  measured: M;
  load: Load;
  /** PostgreSQL's checkpoints and autovacuum during the measurement ("" for none). */
  background: string;
  /** Bytes of WAL the bench PostgreSQL wrote during the measurement (none without one). */
  walBytes?: number;
}

/**
 * Measures every side once a round, rotating the order so no side always runs first or right
 * after what another left behind (a checkpoint, autovacuum, a warm cache).
 */
export async function inTurns<S, M>(sides: readonly S[], rounds: number, measure: (side: S, round: number) => Promise<M>): Promise<Turn<S, M>[]> {
  const turns: Turn<S, M>[] = [];
  const watch = await watchRounds();
  try {
    for (let round = 0; round < rounds; round++) {
      const first = round % sides.length;
      const order = [...sides.entries()];
      for (const [index, side] of [...order.slice(first), ...order.slice(0, first)]) {
        const stop = await watch.start();
        const measured = await measure(side, round);
        turns.push({ side, index, round: round + 1, measured, ...(await stop()) });
      }
    }
  } finally {
    await watch.close();
  }
  return turns;
}

/**
 * Measures `sides` in alternating rounds (A B, B A, A B, ...; `ROUNDS` of each, see inTurns), printing
 * every round with the machine's load while it ran and any failed responses; the sides
 * are compared by the median of the per-round req/s ratios (first side over second).
 */
export async function alternate(title: string, sides: Side[], rounds = ROUNDS): Promise<Alternation> {
  const results: SideResult[] = sides.map((s) => ({ name: s.name, rounds: [], rps: 0, p50: 0, p99: 0, failures: 0 }));
  const turns = await inTurns(sides, rounds, (side, round) => side.measure(round));
  for (const t of turns) results[t.index]!.rounds.push({ ...t.measured, load: t.load, background: t.background, walBytes: t.walBytes });
  const serverKnown = turns.some((t) => t.measured.serverWaited !== undefined);
  const walKnown = turns.some((t) => t.walBytes !== undefined);
  const rows = turns.map(({ side, round, measured: m, load: l, background, walBytes }) => ({
    round,
    side: side.name,
    "req/s": fmt(m.rps),
    "p50 ms": fmt(m.p50, 2),
    "p99 ms": fmt(m.p99, 2),
    failures: m.failures,
    ...(serverKnown ? { "server waited": percent(m.serverWaited) } : {}),
    ...(walKnown ? { "WAL B/req": bytes(walPerRequest(walBytes, m.requests)) } : {}),
    ...loadColumns(l),
    "postgres background": background,
  }));
  console.log(`\n${title}: ${rounds} alternating round(s)`);
  table(rows);
  if (serverKnown) {
    const waits = results.flatMap((r) => {
      const shares = r.rounds.flatMap((x) => (x.serverWaited === undefined ? [] : [x.serverWaited]));
      return shares.length ? [`${r.name} ${percent(median(shares))}`] : [];
    });
    console.log(`server's main thread waited for a core (of the time it was ready to run; median of rounds): ${waits.join(", ")}`);
  }
  if (walKnown) {
    const wal = results.flatMap((r) => {
      const perRequest = r.rounds.flatMap((x) => walPerRequest(x.walBytes, x.requests) ?? []);
      return perRequest.length ? [`${r.name} ${bytes(median(perRequest))}`] : [];
    });
    console.log(`WAL written per request (all of PostgreSQL's, median of rounds, bytes): ${wal.join(", ")}`);
  }
  for (const r of results) {
    r.rps = median(r.rounds.map((x) => x.rps));
    r.p50 = median(r.rounds.map((x) => x.p50));
    r.p99 = median(r.rounds.map((x) => x.p99));
    r.failures = r.rounds.reduce((n, x) => n + x.failures, 0);
    const samples = [...new Set(r.rounds.flatMap((x) => x.samples))].slice(0, 5);
    if (r.failures > 0) console.log(`FAILED RESPONSES from ${r.name}: ${r.failures}; e.g.\n  ${samples.join("\n  ")}`);
  }
  const ratios = results.length > 1 ? roundRatios(results[0]!, results[1]!) : [];
  const disturbed = results.reduce((n, r) => n + r.rounds.filter((x) => x.load.disturbed).length, 0);
  const background = results.reduce((n, r) => n + r.rounds.filter((x) => x.background).length, 0);
  const out: Alternation = {
    title,
    sides: results,
    ratios,
    ratio: ratios.length ? median(ratios) : NaN,
    failures: results.reduce((n, r) => n + r.failures, 0),
    disturbed,
    background,
  };
  if (ratios.length) {
    console.log(
      `${results[0]!.name} / ${results[1]!.name}: median ${fmt(out.ratio, 2)}x (rounds ${ratios.map((r) => `${fmt(r, 2)}x`).join(", ")}); ` +
        `${disturbed} of ${rounds * sides.length} measurements disturbed (others > ${DISTURBED_CORES} core)` +
        `${background ? `; ${background} with a PostgreSQL checkpoint or autovacuum` : ""}${out.failures ? `; ${out.failures} FAILED responses` : ""}`,
    );
  }
  return out;
}

/**
 * Rounds per level of `alternateAtLevels`: repeated runs of the same code flipped a verdict
 * on one round's difference with three, and a median of five moves less.
 */
const LEVEL_ROUNDS = comparisonRounds(5);

/**
 * `alternate` at each concurrency in `levels`, then each side at its own peak (its best
 * median req/s over the levels): equal-concurrency ratios and the peak-to-peak ratio.
 */
export async function alternateAtLevels(title: string, levels: number[], sides: (connections: number) => Side[]) {
  const perLevel: { connections: number; result: Alternation }[] = [];
  for (const connections of levels)
    perLevel.push({ connections, result: await alternate(`${title}, ${connections} connections`, sides(connections), LEVEL_ROUNDS) });
  const peak = (i: number) => Math.max(...perLevel.map((l) => l.result.sides[i]!.rps));
  const peakRatio = peak(0) / peak(1);
  const names = perLevel[0]!.result.sides.map((s) => s.name);
  console.log(`${title}: peak ${names[0]} ${fmt(peak(0))} req/s, peak ${names[1]} ${fmt(peak(1))} req/s: ${fmt(peakRatio, 2)}x`);
  return { perLevel, peakRatio, failures: perLevel.reduce((n, l) => n + l.result.failures, 0) };
}
