import { Writable } from "node:stream";
import type { Logger } from "pino";
import { createLogger } from "../../cli/logger.js";

/** A real pino logger (same redaction as production) whose lines are kept for assertions. */
export function createCapturedLogger(level = "info"): { logger: Logger; lines: string[]; text(): string } {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { logger: createLogger(level, sink), lines, text: () => lines.join("") };
}
