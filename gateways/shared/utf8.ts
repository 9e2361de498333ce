/**
 * Request bodies are UTF-8 (JSON by RFC 8259, forms by the URL standard): other bytes are
 * refused, never read as U+FFFD and stored. A BOM is kept, so JSON that starts with one is bad JSON.
 */
const STRICT_UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** The body of a request whose bytes are not UTF-8: each surface refuses it in its own envelope. */
export const NOT_UTF8: unique symbol = Symbol("not UTF-8");

/** The message every surface gives for such a body. */
export const NOT_UTF8_MESSAGE = "request body is not valid UTF-8";

/** A body's text, or NOT_UTF8. */
export function utf8Text(body: Buffer): string | typeof NOT_UTF8 {
  try {
    return STRICT_UTF8.decode(body);
  } catch {
    return NOT_UTF8;
  }
}

/** A fastify content-type parser (parseAs "buffer") giving the text or NOT_UTF8. */
export function utf8Parser(_request: unknown, body: Buffer | string, done: (err: null, body: string | typeof NOT_UTF8) => void): void {
  done(null, typeof body === "string" ? body : utf8Text(body));
}
