import type { Logger } from "pino";
import { pollLoop } from "../../../lib/poll-loop.js";
import { pinnedRequest, urlHost } from "../../net/pinned-request.js";
import { isPublicAddress } from "../../net/public-address.js";
import { createHostResolver, type HostResolverOptions } from "../../net/resolver.js";
import type { DueDelivery, Lane, OutboxStore } from "./outbox-store.js";
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
  /**
   * How long a lease on a partner's lane and on the event being sent lasts; renewed before
   * every request. Must exceed timeoutMs by LEASE_MARGIN_MS, so a live worker never loses
   * a lease while its request is on the wire.
   */
  leaseMs?: number;
  /** Per-request timeout. */
  timeoutMs?: number;
  /** Events one lane sends before it is given back (the next poll takes it again). */
  batchSize?: number;
  /** Partners served at once by this worker, each by its own lane. */
  maxLanes?: number;
  /**
   * Name servers and lookup timeout of the worker's own resolver (core/net/resolver.ts), which
   * allows one lookup per lane, so no other surface's lookups can fail a delivery as busy.
   */
  resolver?: Omit<HostResolverOptions, "maxConcurrent">;
  /** Development only: deliver to private, loopback and link-local addresses too; default false. */
  allowPrivate?: boolean;
}

/** What a lease must exceed the per-request timeout by (clock skew between replicas, database round trips). */
export const LEASE_MARGIN_MS = 5_000;

export interface WebhookWorker {
  /** Takes every free lane and works each through (up to batchSize events); resolves with how many deliveries were attempted. */
  runOnce(): Promise<number>;
  /** Stops the loop and waits for the current pass. */
  stop(): Promise<void>;
}

/** A receiver host that resolves to an address core must not reach for a partner (the attempt fails). */
export class NonPublicAddressError extends Error {
  override name = "NonPublicAddressError";
}

/** The exponential backoff after `attempts` failed attempts. */
export function backoffMs(attempts: number, baseMs: number, maxMs: number): number {
  return Math.min(maxMs, baseMs * 2 ** Math.max(0, attempts - 1));
}

/**
 * Delivers outbox events (Standard Webhooks, exponential backoff) one lane per partner, so a slow
 * receiver delays only its own partner; the lease and the partner are re-read just before each
 * request, and a result counts only if that attempt still owns the event.
 */
export function createWebhookWorker(options: WebhookWorkerOptions): WebhookWorker {
  const baseMs = options.baseDelayMs ?? 30_000;
  const maxMs = options.maxDelayMs ?? 6 * 3600_000;
  const maxAttempts = options.maxAttempts ?? 12;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const leaseMs = options.leaseMs ?? Math.max(60_000, timeoutMs + LEASE_MARGIN_MS);
  if (leaseMs < timeoutMs + LEASE_MARGIN_MS) throw new Error(`webhook leaseMs must be at least timeoutMs + ${LEASE_MARGIN_MS} ms`);
  const batchSize = options.batchSize ?? 50;
  const maxLanes = options.maxLanes ?? 32;
  const { outbox, logger } = options;
  const resolver = createHostResolver({ ...options.resolver, maxConcurrent: maxLanes });
  if (options.allowPrivate) logger.warn("webhooks may be delivered to private and loopback addresses (development setting)");
  const running = new Set<Promise<number>>();

  async function deliverOne(d: DueDelivery): Promise<void> {
    const now = options.clock();
    const body = JSON.stringify({ type: d.type, timestamp: d.createdAt.toISOString(), data: d.data });
    let error: string;
    try {
      const secrets = [options.box.open(d.webhookSecretEnc), ...(d.previousSecretEnc ? [options.box.open(d.previousSecretEnc)] : [])];
      const headers = signWebhook(secrets, d.id, Math.floor(now.getTime() / 1000), body);
      const status = await post(d, { ...headers, "content-type": "application/json", "user-agent": "vaultgate-webhooks" }, body);
      if (status === "withdrawn") {
        logger.info({ eventId: d.id, attempts: d.attempts }, "webhook not sent: its user was deactivated or the consent it was sent under withdrawn");
        return;
      }
      if (status === "held") {
        logger.info(
          { eventId: d.id, attempts: d.attempts },
          "webhook not sent: the partner was suspended, lost the entitlement or had its webhook set again meanwhile; it waits",
        );
        return;
      }
      if (status === "lost") {
        logger.warn({ eventId: d.id, attempts: d.attempts }, "webhook attempt outlived its lease; not sent");
        return;
      }
      if (status >= 200 && status < 300) {
        if (!(await outbox.markDelivered(d.seq, d.attempts, options.clock()))) {
          logger.warn({ eventId: d.id, attempts: d.attempts }, "webhook delivered after its lease passed to another attempt; not recorded");
        }
        return;
      }
      if (status === 410) return await gone(d);
      error = `HTTP ${status}`;
    } catch (err) {
      error = err instanceof Error ? err.name : "delivery error";
    }
    const next = d.attempts >= maxAttempts ? undefined : new Date(now.getTime() + backoffMs(d.attempts, baseMs, maxMs));
    // A receiver that never answers 2xx stays unnoticed unless its last attempt says so loudly.
    if (next) logger.info({ eventId: d.id, attempts: d.attempts, error }, "webhook delivery failed; it will be retried");
    else logger.warn({ eventId: d.id, partnerId: d.partnerId, attempts: d.attempts, error }, "webhook delivery given up: the event is marked failed");
    if (!(await outbox.markRetry(d.seq, d.attempts, next, error))) {
      logger.warn({ eventId: d.id, attempts: d.attempts }, "webhook attempt outlived its lease; result not recorded");
    }
  }

  /** A 410 Gone: the endpoint is gone, so the event waits, first in order, for a URL set again; nothing more goes to this one. */
  async function gone(d: DueDelivery): Promise<void> {
    const outcome = await outbox.markGone(d, options.clock());
    if (outcome === "lost") logger.warn({ eventId: d.id, attempts: d.attempts }, "webhook attempt outlived its lease; result not recorded");
    else if (outcome === "paused") {
      logger.warn({ eventId: d.id, partnerId: d.partnerId }, "webhook endpoint answered 410 Gone: deliveries pause until the webhook URL is set again");
    } else logger.info({ eventId: d.id, attempts: d.attempts }, "webhook answered 410 Gone but was set again since; the event goes to the one set now");
  }

  /**
   * POSTs one delivery and answers the status, or why it was not sent. The host is resolved by the bounded
   * resolver, checked to be public, and connected to at that address only; the request is written once
   * connected, inside outbox.whileSendable; redirects are not followed; all of it shares the timeout.
   */
  async function post(d: DueDelivery, headers: Record<string, string>, body: string): Promise<number | "withdrawn" | "held" | "lost"> {
    const url = new URL(d.webhookUrl);
    const signal = AbortSignal.timeout(timeoutMs);
    const addresses = await Promise.race([
      resolver.resolve(urlHost(url)),
      new Promise<never>((_, reject) => signal.addEventListener("abort", () => reject(signal.reason as Error), { once: true })),
    ]);
    if (!options.allowPrivate && addresses.some((a) => !isPublicAddress(a.address))) throw new NonPublicAddressError("receiver host is not public");
    const req = pinnedRequest(url, addresses[0]!, { method: "POST", signal, headers: { ...headers, "content-length": Buffer.byteLength(body) } });
    const failed = new Promise<never>((_, reject) => req.on("error", reject));
    failed.catch(() => {});
    const answered = new Promise<number>((resolve) =>
      req.on("response", (res) => {
        // Only the status counts: the body is never read, and the connection is never reused.
        resolve(res.statusCode ?? 0);
        res.destroy();
      }),
    );
    const connected = new Promise<void>((resolve) =>
      req.once("socket", (socket) => socket.once(url.protocol === "https:" ? "secureConnect" : "connect", resolve)),
    );
    await Promise.race([connected, failed]);
    const outcome = await outbox.whileSendable(d, () => Promise.race([failed, new Promise<void>((resolve) => req.end(body, resolve))]));
    if (outcome !== "sent") {
      req.destroy();
      return outcome;
    }
    return Promise.race([answered, failed]);
  }

  /** Sends one partner's due events in sequence order, one at a time; resolves with the attempts made. */
  async function runLane(lane: Lane): Promise<number> {
    let attempted = 0;
    try {
      while (attempted < batchSize && !loop.stopped) {
        const now = options.clock();
        const step = await outbox.leaseNext(lane, now, new Date(now.getTime() + leaseMs));
        if (step.kind === "lost") logger.warn({ partnerId: lane.partnerId }, "webhook lane lease ran out; another worker holds it");
        if (step.kind !== "deliver") break;
        attempted++;
        await deliverOne(step.delivery);
      }
    } finally {
      await outbox.releaseLane(lane).catch((err: unknown) => logger.error({ err }, "webhook lane release failed"));
    }
    return attempted;
  }

  /** Takes free lanes and starts them; resolves once they are started, with their completions. */
  async function claim(): Promise<Promise<number>[]> {
    const free = maxLanes - running.size;
    if (loop.stopped || free <= 0) return [];
    const now = options.clock();
    const lanes = await outbox.claimLanes(now, new Date(now.getTime() + leaseMs), free);
    return lanes.map((lane) => {
      const done = runLane(lane).catch((err: unknown) => {
        logger.error({ err }, "webhook lane failed");
        return 0;
      });
      running.add(done);
      void done.finally(() => running.delete(done));
      return done;
    });
  }

  // A pass only starts lanes; stop waits for the lanes themselves too.
  const loop = pollLoop({ intervalMs: options.pollMs, pass: claim, onError: (err) => logger.error({ err }, "webhook pass failed") });

  return {
    async runOnce() {
      const counts = await Promise.all(await claim());
      return counts.reduce((a, b) => a + b, 0);
    },
    async stop() {
      await loop.stop();
      await Promise.all([...running]);
    },
  };
}
