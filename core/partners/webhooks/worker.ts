import type { Logger } from "pino";
import type { OutboxStore } from "./outbox-store.js";
import { signWebhook, type SecretBox } from "./signing.js";

export interface WebhookWorkerOptions {
  outbox: OutboxStore;
  box: SecretBox;
  clock: () => Date;
  logger: Logger;
  /** How often the background loop looks for due deliveries; 0 = no loop (call runOnce). */
  pollMs: number;
  /** First retry delay; doubles per attempt up to maxDelayMs. */
  baseDelayMs?: number;
  maxDelayMs?: number;
  /** After this many attempts an event is marked failed. */
  maxAttempts?: number;
  /** How long a claimed delivery is leased before another worker may retry it. */
  leaseMs?: number;
  /** Per-request timeout. */
  timeoutMs?: number;
  batchSize?: number;
}

export interface WebhookWorker {
  /** Delivers every due event once; resolves with how many were attempted. */
  runOnce(): Promise<number>;
  /** Stops the loop and waits for the current pass. */
  stop(): Promise<void>;
}

/** The exponential backoff after `attempts` failed attempts. */
export function backoffMs(attempts: number, baseMs: number, maxMs: number): number {
  return Math.min(maxMs, baseMs * 2 ** Math.max(0, attempts - 1));
}

/** Delivers outbox events with Standard Webhooks signatures and exponential backoff. */
export function createWebhookWorker(options: WebhookWorkerOptions): WebhookWorker {
  const baseMs = options.baseDelayMs ?? 30_000;
  const maxMs = options.maxDelayMs ?? 6 * 3600_000;
  const maxAttempts = options.maxAttempts ?? 12;
  const leaseMs = options.leaseMs ?? 60_000;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const batchSize = options.batchSize ?? 50;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let current: Promise<unknown> = Promise.resolve();

  async function deliverOne(d: Awaited<ReturnType<OutboxStore["claimDue"]>>[number]): Promise<void> {
    const now = options.clock();
    const body = JSON.stringify({ type: d.type, timestamp: d.createdAt.toISOString(), data: d.data });
    let error: string;
    try {
      const headers = signWebhook(options.box.open(d.webhookSecretEnc), d.id, Math.floor(now.getTime() / 1000), body);
      const res = await fetch(d.webhookUrl, {
        method: "POST",
        headers: { ...headers, "content-type": "application/json", "user-agent": "vaultgate-webhooks" },
        body,
        redirect: "manual",
        signal: AbortSignal.timeout(timeoutMs),
      });
      await res.body?.cancel().catch(() => {});
      if (res.status >= 200 && res.status < 300) {
        await options.outbox.markDelivered(d.seq, options.clock());
        return;
      }
      error = `HTTP ${res.status}`;
    } catch (err) {
      error = err instanceof Error ? err.name : "delivery error";
    }
    const next = d.attempts >= maxAttempts ? undefined : new Date(now.getTime() + backoffMs(d.attempts, baseMs, maxMs));
    options.logger.info({ eventId: d.id, attempts: d.attempts, error, gaveUp: !next }, "webhook delivery failed");
    await options.outbox.markRetry(d.seq, next, error);
  }

  async function pass(): Promise<number> {
    const now = options.clock();
    const due = await options.outbox.claimDue(now, new Date(now.getTime() + leaseMs), batchSize);
    // One partner's events go out in order; different partners in parallel.
    const byPartner = new Map<string, typeof due>();
    for (const d of due) byPartner.set(d.partnerId, [...(byPartner.get(d.partnerId) ?? []), d]);
    await Promise.all(
      [...byPartner.values()].map(async (list) => {
        for (const d of list) await deliverOne(d);
      }),
    );
    return due.length;
  }

  function schedule() {
    if (stopped || options.pollMs <= 0) return;
    timer = setTimeout(() => {
      current = pass()
        .catch((err: unknown) => options.logger.error({ err }, "webhook pass failed"))
        .finally(schedule);
    }, options.pollMs);
    timer.unref();
  }
  schedule();

  return {
    async runOnce() {
      const run = current.then(() => pass());
      current = run.catch(() => {});
      return run;
    },
    async stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      await current.catch(() => {});
    },
  };
}
