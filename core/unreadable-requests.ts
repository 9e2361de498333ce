import { Code, type ConnectError, type ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { endStreamFlag, endStreamFromJson, endStreamToJson, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { trailerFlag, trailerParse, trailerSerialize } from "@connectrpc/connect/protocol-grpc-web";
import { Reason } from "../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "./errors.js";

/** What Connect says, as INTERNAL, about a request message it could not read: all the caller's doing. */
const UNREADABLE = /^(parse binary: |decompression failed|received compressed envelope, but do not know how to decompress)/;
/** What Connect says, as RESOURCE_EXHAUSTED (429 on Connect, inviting a retry), of a message over its read limit. */
const TOO_LARGE = /^message (?:size (?:\d+ )?)?is larger than configured readMaxBytes (\d+)/;

function invalid(message: string): ConnectError {
  try {
    return fail(Reason.INVALID_REQUEST, message);
  } catch (err) {
    return err as ConnectError;
  }
}

function size(bytes: number): string {
  return bytes % (1024 * 1024) === 0 ? `${bytes / (1024 * 1024)} MiB` : bytes % 1024 === 0 ? `${bytes / 1024} KiB` : `${bytes} bytes`;
}

/** Core's own refusal for what Connect said of a request message (its code, its message), if it is one of those. */
function refusal(code: Code | undefined, message: string): ConnectError | undefined {
  if (code === Code.Internal && UNREADABLE.test(message)) return invalid(`the request message cannot be read: ${message}`);
  const limit = code === Code.ResourceExhausted ? TOO_LARGE.exec(message) : null;
  if (limit) return invalid(`the request message is larger than ${size(Number(limit[1]))}, the most core reads for this call`);
  return undefined;
}

const GRPC_CODES: Record<string, Code> = { "8": Code.ResourceExhausted, "13": Code.Internal };
const CONNECT_CODES: Record<string, Code> = { resource_exhausted: Code.ResourceExhausted, internal: Code.Internal };

/**
 * Connect answers a request message it cannot decode (not protobuf, a string that is not UTF-8, an
 * unknown compression) with INTERNAL, and one over its size limit with RESOURCE_EXHAUSTED, before
 * any interceptor runs, in every protocol; core answers INVALID_REQUEST to both.
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

/** Connect writes each frame as one chunk: an uncompressed last frame of exactly this kind is the status. */
function lastFrame(chunk: Uint8Array, flag: number): Uint8Array | undefined {
  if (chunk.byteLength < 5 || chunk[0] !== flag) return undefined;
  const length = new DataView(chunk.buffer, chunk.byteOffset, chunk.byteLength).getUint32(1);
  return length === chunk.byteLength - 5 ? chunk.subarray(5) : undefined;
}

function frame(flag: number, data: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + data.byteLength);
  new DataView(out.buffer).setUint32(1, data.byteLength);
  out[0] = flag;
  out.set(data, 5);
  return out;
}

/** gRPC-Web's trailer frame, or Connect streaming's end-stream frame, saying INTERNAL of an unreadable request. */
function refusedFrame(chunk: Uint8Array, grpcWeb: boolean): Uint8Array | undefined {
  const data = lastFrame(chunk, grpcWeb ? trailerFlag : endStreamFlag);
  if (!data) return undefined;
  if (grpcWeb) {
    const trailer = trailerParse(data);
    const refused = refusal(GRPC_CODES[trailer.get("grpc-status") ?? ""], percentDecoded(trailer.get("grpc-message") ?? ""));
    if (!refused) return undefined;
    setTrailerStatus(trailer, refused);
    return frame(trailerFlag, trailerSerialize(trailer));
  }
  let end: ReturnType<typeof endStreamFromJson>;
  try {
    end = endStreamFromJson(data);
  } catch {
    return undefined;
  }
  const refused = end.error && refusal(end.error.code, end.error.rawMessage);
  if (!refused) return undefined;
  const json = endStreamToJson(end.metadata, refused, {});
  return frame(endStreamFlag, new TextEncoder().encode(JSON.stringify(json)));
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
        const refused = refusal(GRPC_CODES[trailer.get("grpc-status") ?? ""], percentDecoded(trailer.get("grpc-message") ?? ""));
        if (refused) setTrailerStatus(trailer, refused);
      })(),
    };
  }
  // gRPC-Web and Connect streaming: the status is the body's last frame.
  const framed = /^application\/(grpc-web|connect)\+/.exec(type);
  if (framed && body && Symbol.asyncIterator in body) {
    const grpcWeb = framed[1] === "grpc-web";
    return {
      ...res,
      body: (async function* () {
        for await (const chunk of body) yield refusedFrame(chunk, grpcWeb) ?? chunk;
      })(),
    };
  }
  // Connect unary: a 500 or 429 whose whole JSON body names the failure.
  if (
    (res.status === 500 || res.status === 429) &&
    type === "application/json" &&
    !res.header?.has("content-encoding") &&
    body &&
    Symbol.asyncIterator in body
  ) {
    const chunks: Uint8Array[] = [];
    for await (const c of body) chunks.push(c);
    const bytes = Buffer.concat(chunks);
    let refused: ConnectError | undefined;
    try {
      const parsed = JSON.parse(bytes.toString("utf8")) as { code?: unknown; message?: unknown };
      if (typeof parsed.code === "string" && typeof parsed.message === "string") refused = refusal(CONNECT_CODES[parsed.code], parsed.message);
    } catch {
      // Not an error body Connect wrote: pass it on unchanged.
    }
    if (!refused)
      return {
        ...res,
        body: (async function* () {
          yield bytes;
        })(),
      };
    const out = errorToJsonBytes(refused, {});
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
