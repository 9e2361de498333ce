import { Code, type ConnectError, type ConnectRouter } from "@connectrpc/connect";
import type { UniversalHandler, UniversalServerResponse } from "@connectrpc/connect/protocol";
import { endStreamFlag, endStreamFromJson, endStreamToJson, errorToJsonBytes } from "@connectrpc/connect/protocol-connect";
import { setTrailerStatus } from "@connectrpc/connect/protocol-grpc";
import { trailerFlag, trailerParse, trailerSerialize } from "@connectrpc/connect/protocol-grpc-web";
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
 * unknown compression) with INTERNAL before any interceptor runs, in every protocol; core answers INVALID_REQUEST.
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
    if (trailer.get("grpc-status") !== "13" || !UNREADABLE.test(percentDecoded(trailer.get("grpc-message") ?? ""))) return undefined;
    setTrailerStatus(trailer, refusal(percentDecoded(trailer.get("grpc-message") ?? "")));
    return frame(trailerFlag, trailerSerialize(trailer));
  }
  let end: ReturnType<typeof endStreamFromJson>;
  try {
    end = endStreamFromJson(data);
  } catch {
    return undefined;
  }
  if (end.error?.code !== Code.Internal || !UNREADABLE.test(end.error.rawMessage)) return undefined;
  const json = endStreamToJson(end.metadata, refusal(end.error.rawMessage), {});
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
        if (trailer.get("grpc-status") !== "13") return;
        const message = percentDecoded(trailer.get("grpc-message") ?? "");
        if (UNREADABLE.test(message)) setTrailerStatus(trailer, refusal(message));
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
