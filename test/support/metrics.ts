import { startMetricsServer } from "../../cli/metrics-server.js";
import { coreRegistry, type groupCommitBatchSize, groupCommitQueued, type rpcDuration } from "../../core/observability/metrics.js";

/** `name{labels} value` lines of a Prometheus text scrape, keyed by `name{labels}` as written. */
export function parseScrape(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const at = line.lastIndexOf(" ");
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

/** A metrics listener on core's registry (port 0) and a scrape of it: `value(name, labels)` is one series (no labels: the unlabelled one), undefined when absent. */
export async function coreMetricsListener() {
  const server = await startMetricsServer({ host: "127.0.0.1", port: 0, registries: [coreRegistry] });
  return {
    async scrape() {
      const res = await fetch(server.url);
      if (res.status !== 200) throw new Error(`GET /metrics answered ${res.status}`);
      const series = parseScrape(await res.text());
      return {
        value: (name: string, labels: Record<string, string>) =>
          series.get(
            Object.keys(labels).length === 0
              ? name
              : `${name}{${Object.entries(labels)
                  .map(([k, v]) => `${k}="${v}"`)
                  .join(",")}}`,
          ),
      };
    },
    close: () => server.close(),
  };
}

/**
 * The _count of one of core's histograms for `labels` (every series with them, summed), read in this
 * process: unlike a scrape, it queries no database, so it answers while a test holds the database.
 */
export async function countOf(histogram: typeof rpcDuration | typeof groupCommitBatchSize, labels: Record<string, string>): Promise<number> {
  const series = (await histogram.get()).values;
  return series
    .filter((v) => v.metricName?.endsWith("_count") && Object.entries(labels).every(([k, l]) => v.labels[k as never] === l))
    .reduce((n, v) => n + v.value, 0);
}

/** Items waiting for a batch of the group-commit batcher `batcher`, read in this process (like countOf). */
export async function queuedIn(batcher: string): Promise<number> {
  return (await groupCommitQueued.get()).values.find((v) => v.labels.batcher === batcher)?.value ?? 0;
}
