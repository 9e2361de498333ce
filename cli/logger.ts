import { isSpanContextValid, trace } from "@opentelemetry/api";
import pino, { type Logger, type DestinationStream } from "pino";

/** Paths pino blanks in every log line (STYLE: no secret or token in a log). */
export const REDACT_PATHS = [
  "req.headers.authorization",
  "req.headers.cookie",
  "headers.authorization",
  "authorization",
  "cookie",
  "*.client_secret",
  "*.clientSecret",
  "*.refresh_token",
  "*.refreshToken",
  "*.access_token",
  "*.accessToken",
  "*.code",
  "*.code_verifier",
  "*.password",
  "*.token",
  "*.secret",
  "client_secret",
  "refresh_token",
  "access_token",
  "password",
  "token",
  "secret",
];

/**
 * Lines go to stdout synchronously by default. pino's own default writes through the
 * libuv thread pool, the pool scrypt used then (partner and client secrets, about 50 ms a
 * derivation; now on threads of their own): every log line waited behind derivations and took a pool slot from
 * the next one (`npm run bench partner-token`: issuance p50 1.21-1.30x the scrypt+ES256
 * floor with pool writes, 1.18-1.19x with synchronous ones).
 */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      mixin: traceFields,
      redact: { paths: REDACT_PATHS, censor: "[redacted]" },
      serializers: {
        // Paths only: query strings can carry codes and states.
        req: (req: { method: string; url: string; id: string }) => ({ method: req.method, path: req.url.split("?")[0], id: req.id }),
      },
    },
    destination ?? pino.destination({ dest: 1, sync: true }),
  );
}

/**
 * `traceId` and `spanId` of the span active where a line is written (when tracing is on,
 * docs/operating-observability.md), so a log line leads to its trace and back.
 */
function traceFields(): object {
  // A fresh object each time: pino merges the line's own fields into it.
  const span = trace.getActiveSpan();
  if (!span) return {};
  const sc = span.spanContext();
  return isSpanContextValid(sc) ? { traceId: sc.traceId, spanId: sc.spanId } : {};
}
