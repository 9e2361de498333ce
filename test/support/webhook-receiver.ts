import { randomBytes } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";

export interface ReceivedWebhook {
  headers: IncomingHttpHeaders;
  body: string;
  /** Arrival order across every receiver of this process (merges several receivers' deliveries). */
  arrival: number;
}

let arrivals = 0;

export interface HeldRequest {
  /** Index into `received`. */
  index: number;
  /** Answers the held request (default: `status()`). */
  answer(status?: number): void;
}

/**
 * A webhook receiver recording deliveries on a random path, so an earlier test's partner on the
 * same port never shows up here. `hold()` defers answers until `answer()` (a slow receiver without timers).
 */
export async function startWebhookReceiver(status: () => number = () => 204) {
  const path = `/hooks/${randomBytes(6).toString("hex")}`;
  const received: ReceivedWebhook[] = [];
  const held: HeldRequest[] = [];
  let holding = false;
  let waiters: (() => void)[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      if (req.url !== path) {
        res.statusCode = 404;
        res.end();
        return;
      }
      const index = received.push({ headers: req.headers, body: Buffer.concat(chunks).toString("utf8"), arrival: arrivals++ }) - 1;
      let answered = false;
      const answer = (code = status()) => {
        if (answered) return;
        answered = true;
        res.statusCode = code;
        res.end();
      };
      if (holding) held.push({ index, answer });
      else answer();
      const w = waiters;
      waiters = [];
      for (const fn of w) fn();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const release = (code?: number) => {
    holding = false;
    for (const h of held.splice(0)) h.answer(code);
  };
  return {
    url: `http://127.0.0.1:${port}${path}`,
    received,
    /** Requests recorded while holding, in arrival order (answering one leaves it here; `release` empties it). */
    held,
    /** From now on, hold requests until answered. */
    hold() {
      holding = true;
    },
    /** Stops holding and answers every held request with `code` (default `status()`). */
    release,
    /** Resolves once at least n deliveries arrived (no timers: the test timeout bounds it). */
    async waitFor(n: number) {
      while (received.length < n) await new Promise<void>((resolve) => waiters.push(resolve));
    },
    close() {
      release();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
