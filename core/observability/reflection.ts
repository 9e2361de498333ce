import { createRegistry, toBinary, type DescFile, type DescService } from "@bufbuild/protobuf";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import type { ServiceImpl } from "@connectrpc/connect";
import { ServerReflection as ReflectionV1 } from "../../gen/grpc/reflection/v1/reflection_pb.js";
import { ServerReflection as ReflectionV1Alpha } from "../../gen/grpc/reflection/v1alpha/reflection_pb.js";

/** gRPC status NOT_FOUND, as reflection's ErrorResponse carries it. */
const NOT_FOUND = 5;

/** The question of one reflection request, in the shape both protocol versions share. */
type Question =
  | { case: "fileByFilename" | "fileContainingSymbol" | "allExtensionNumbersOfType" | "listServices"; value: string }
  | { case: "fileContainingExtension"; value: { containingType: string; extensionNumber: number } }
  | { case: undefined; value?: undefined };

type Answer =
  | { case: "fileDescriptorResponse"; value: { fileDescriptorProto: Uint8Array[] } }
  | { case: "allExtensionNumbersResponse"; value: { baseTypeName: string; extensionNumber: number[] } }
  | { case: "listServicesResponse"; value: { service: { name: string }[] } }
  | { case: "errorResponse"; value: { errorCode: number; errorMessage: string } };

/**
 * gRPC server reflection, so stock tools can list and call core from its address alone. It only
 * describes: every RPC still takes its own credential.
 */
export function createReflectionServices(services: readonly DescService[]): {
  v1: ServiceImpl<typeof ReflectionV1>;
  v1alpha: ServiceImpl<typeof ReflectionV1Alpha>;
} {
  const all = [...services, ReflectionV1, ReflectionV1Alpha];
  const files = new Map<string, DescFile>();
  const addFile = (f: DescFile) => {
    if (files.has(`${f.name}.proto`)) return;
    files.set(`${f.name}.proto`, f);
    f.dependencies.forEach(addFile);
  };
  for (const s of all) addFile(s.file);
  const registry = createRegistry(...files.values());
  const serialized = new Map<DescFile, Uint8Array>();
  const bytesOf = (f: DescFile) => {
    let b = serialized.get(f);
    if (!b) serialized.set(f, (b = toBinary(FileDescriptorProtoSchema, f.proto)));
    return b;
  };
  const serviceNames = all.map((s) => ({ name: s.typeName })).sort((a, b) => a.name.localeCompare(b.name));

  /** The file and its imports, leaving out those this stream has already sent (the protocol allows it). */
  const withDependencies = (file: DescFile, sent: Set<DescFile>): Answer => {
    const out: Uint8Array[] = [];
    const visit = (f: DescFile) => {
      if (sent.has(f)) return;
      sent.add(f);
      out.push(bytesOf(f));
      f.dependencies.forEach(visit);
    };
    // The asked-for file always goes first, even when sent before: a client asks again when it lost it.
    sent.delete(file);
    visit(file);
    return { case: "fileDescriptorResponse", value: { fileDescriptorProto: out } };
  };

  /** The file declaring `symbol`: a type or service, or a member of one (method, field, enum value). */
  const fileOfSymbol = (symbol: string): DescFile | undefined => {
    for (let name = symbol; name; name = name.slice(0, Math.max(0, name.lastIndexOf(".")))) {
      const desc = registry.get(name);
      if (desc) return desc.file;
    }
    return undefined;
  };

  const notFound = (what: string): Answer => ({ case: "errorResponse", value: { errorCode: NOT_FOUND, errorMessage: `${what} not found` } });

  const answer = (q: Question, sent: Set<DescFile>): Answer => {
    switch (q.case) {
      case "listServices":
        return { case: "listServicesResponse", value: { service: serviceNames } };
      case "fileByFilename": {
        const f = files.get(q.value);
        return f ? withDependencies(f, sent) : notFound(`file ${JSON.stringify(q.value.slice(0, 200))}`);
      }
      case "fileContainingSymbol": {
        const f = fileOfSymbol(q.value);
        return f ? withDependencies(f, sent) : notFound(`symbol ${JSON.stringify(q.value.slice(0, 200))}`);
      }
      case "fileContainingExtension": {
        const extendee = registry.getMessage(q.value.containingType);
        const ext = extendee && registry.getExtensionFor(extendee, q.value.extensionNumber);
        return ext
          ? withDependencies(ext.file, sent)
          : notFound(`extension ${q.value.extensionNumber} of ${JSON.stringify(q.value.containingType.slice(0, 200))}`);
      }
      case "allExtensionNumbersOfType": {
        if (!registry.getMessage(q.value)) return notFound(`type ${JSON.stringify(q.value.slice(0, 200))}`);
        const numbers: number[] = [];
        for (const d of registry) if (d.kind === "extension" && d.extendee.typeName === q.value) numbers.push(d.number);
        return { case: "allExtensionNumbersResponse", value: { baseTypeName: q.value, extensionNumber: numbers.sort((a, b) => a - b) } };
      }
      default:
        return { case: "errorResponse", value: { errorCode: 3, errorMessage: "the request names no question" } };
    }
  };

  // Both versions have the same messages under two package names; one answer serves both.
  async function* info(requests: AsyncIterable<{ host: string; messageRequest: Question }>) {
    const sent = new Set<DescFile>();
    for await (const req of requests) {
      const q = req.messageRequest;
      const originalRequest = {
        host: req.host,
        messageRequest:
          q.case === "fileContainingExtension"
            ? { case: q.case, value: { containingType: q.value.containingType, extensionNumber: q.value.extensionNumber } }
            : q,
      };
      yield { validHost: req.host, originalRequest, messageResponse: answer(q, sent) };
    }
  }
  return {
    v1: { serverReflectionInfo: info as ServiceImpl<typeof ReflectionV1>["serverReflectionInfo"] },
    v1alpha: { serverReflectionInfo: info as unknown as ServiceImpl<typeof ReflectionV1Alpha>["serverReflectionInfo"] },
  };
}

export { ReflectionV1, ReflectionV1Alpha };
