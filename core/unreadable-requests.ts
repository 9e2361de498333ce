import type { ConnectError, ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { Reason } from "../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "./errors.js";

/** What Connect says, as INTERNAL, about a request message it could not read: all the caller's doing. */
const UNREADABLE = /^(parse binary: |decompression failed|received compressed envelope, but do not know how to decompress)/;

function refusal(what: string): ConnectError {
  try {
    return fail(Reason.INVALID_REQUEST, `the request message cannot be read: ${what}`);
  } catch (err) {
    return err as ConnectError;
  }
}

/**
 * Connect answers a request message it cannot decode (not protobuf, a string that is not UTF-8, an
 * unknown compression) with INTERNAL before any interceptor runs; core answers INVALID_REQUEST instead.
 */
export function refuseUnreadableRequests(router: ConnectRouter): void {
  for (let i = 0; i < router.handlers.length; i++) {
    const handler = router.handlers[i]!;
    const wrapped = async (req: Parameters<UniversalHandler>[0]) => reclassify(await handler(req));
    router.handlers[i] = Object.assign(wrapped, handler);
  }
}

/** A grpc-message as written (percent-encoded); one that does not decode is not Connect's own. */
function percentDecoded(value: string): string {
  try {
    return decodeURIComponent(value);
  } catch {
    return "";
  }
}

async function reclassify(res: UniversalServerResponse): Promise<UniversalServerResponse> {
  const type = res.header?.get("content-type") ?? "";
  const { trailer, body } = res;
  // gRPC: the status is in the trailer, written once the body has been read to its end.
  if (/^application\/grpc(\+|;|$)/.test(type) && trailer && body && Symbol.asyncIterator in body) {
    return {
      ...res,
      body: (async function* () {
        yield* body;
        if (trailer.get("grpc-status") !== "13") return;
        const message = percentDecoded(trailer.get("grpc-message") ?? "");
        if (UNREADABLE.test(message)) setTrailerStatus(trailer, refusal(message));
      })(),
    };
  }
  // Connect unary: a 500 whose whole JSON body names the failure.
  if (res.status === 500 && type === "application/json" && !res.header?.has("content-encoding") && body && Symbol.asyncIterator in body) {
    const chunks: Uint8Array[] = [];
    for await (const c of body) chunks.push(c);
    const bytes = Buffer.concat(chunks);
    let message = "";
    try {
      const parsed = JSON.parse(bytes.toString("utf8")) as { code?: unknown; message?: unknown };
      if (parsed.code === "internal" && typeof parsed.message === "string") message = parsed.message;
    } catch {
      // Not an error body Connect wrote: pass it on unchanged.
    }
    if (!UNREADABLE.test(message))
      return {
        ...res,
        body: (async function* () {
          yield bytes;
        })(),
      };
    const out = errorToJsonBytes(refusal(message), {});
    const header = new Headers(res.header);
    header.set("content-length", String(out.byteLength));
    return {
      ...res,
      status: 400,
      header,
      body: (async function* () {
        yield out;
      })(),
    };
  }
  return res;
}
