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

export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
      level,
      redact: { paths: REDACT_PATHS, censor: "[redacted]" },
      serializers: {
        // Paths only: query strings can carry codes and states.
        req: (req: { method: string; url: string; id: string }) => ({ method: req.method, path: req.url.split("?")[0], id: req.id }),
      },
    },
    destination,
  );
}
