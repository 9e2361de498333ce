import { readdirSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { startStack, type StackOptions, type TestStack } from "./stack.js";

/** Core on its real port with a stock @grpc/grpc-js client built from proto/, as an outside caller reaches it. */

const protoDir = fileURLToPath(new URL("../../proto", import.meta.url));

/**
 * A response as the stock grpc-js client hands it over (proto-loader: snake_case fields, enums by
 * name, 64-bit integers as strings); a check casts it to the few fields it reads.
 */
export type WireResponse = Record<string, unknown>;

type Unary = (
  req: object,
  md: grpc.Metadata,
  options: grpc.CallOptions,
  cb: (err: grpc.ServiceError | null, res: WireResponse) => void,
) => grpc.ClientUnaryCall;
type BidiStream = (md: grpc.Metadata) => grpc.ClientDuplexStream<object, WireResponse>;
type ServerStream = (req: object, md: grpc.Metadata) => grpc.ClientReadableStream<WireResponse>;

export interface GrpcCore {
  server: CoreServer;
  address: string;
  /**
   * Calls `Service/Method` (fully qualified service name) with a stock grpc-js client.
   * A server-streaming call resolves with its first message and is then cancelled. `options` of a
   * unary call: grpc-js's call options (a deadline).
   */
  call(service: string, method: string, req: object, md?: grpc.Metadata, options?: grpc.CallOptions): Promise<WireResponse>;
  close(): Promise<void>;
}

/** Inside a describe: a stack (startStack with `options`) and its core on a real port, made before its tests and closed after them. */
export function grpcCoreSuite(options: StackOptions = {}): { readonly stack: TestStack; readonly core: GrpcCore } {
  let stack: TestStack | undefined;
  let core: GrpcCore | undefined;
  before(async () => {
    stack = await startStack(options);
    core = await startGrpcCore(stack);
  });
  after(async () => {
    await core?.close();
    await stack?.close();
  });
  return {
    get stack() {
      return stack!;
    },
    get core() {
      return core!;
    },
  };
}

/** Core on 127.0.0.1:<ephemeral> over h2c, with grpc-js clients built from proto/ by proto-loader. */
export async function startGrpcCore(stack: Pick<TestStack, "core">): Promise<GrpcCore> {
  const server = await startCoreServer(stack.core, 0, "127.0.0.1");
  const address = server.url.replace("http://", "");
  const protoFiles: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(dir, e.name));
      else if (e.name.endsWith(".proto")) protoFiles.push(relative(protoDir, join(dir, e.name)));
    }
  };
  walk(protoDir);
  const definition = protoLoader.loadSync(protoFiles, { includeDirs: [protoDir], keepCase: true, longs: String, enums: String, defaults: true });
  const clients = new Map<string, grpc.Client & Record<string, Unary & ServerStream>>();
  const clientFor = (service: string) => {
    let c = clients.get(service);
    if (!c) {
      const def = definition[service] as grpc.ServiceDefinition | undefined;
      if (!def || "format" in def) throw new Error(`proto/ defines no service ${service}`);
      const Ctor = grpc.makeGenericClientConstructor(def as grpc.ServiceDefinition, service);
      c = new Ctor(address, grpc.credentials.createInsecure()) as never;
      clients.set(service, c!);
    }
    return c!;
  };
  return {
    server,
    address,
    call(service, method, req, md = new grpc.Metadata(), options = {}) {
      const def = definition[service] as unknown as Record<string, { requestStream: boolean; responseStream: boolean }> | undefined;
      const m = def?.[method];
      if (!m) return Promise.reject(new Error(`proto/ defines no method ${service}/${method}`));
      const client = clientFor(service);
      if (!m.responseStream) {
        return new Promise((resolve, reject) => client[method]!(req, md, options, (err, res) => (err ? reject(err) : resolve(res))));
      }
      return new Promise((resolve, reject) => {
        // A bidi call (reflection) sends `req` as its one message, then half-closes.
        const stream = m.requestStream ? (client[method] as unknown as BidiStream)(md) : (client[method] as ServerStream)(req, md);
        if (m.requestStream) (stream as grpc.ClientDuplexStream<object, WireResponse>).end(req);
        let settled = false;
        stream.on("data", (msg: WireResponse) => {
          if (settled) return;
          settled = true;
          resolve(msg);
          stream.cancel();
        });
        stream.on("error", (err: grpc.ServiceError) => {
          if (!settled) reject(err);
          settled = true;
        });
        stream.on("end", () => {
          if (!settled) reject(new Error(`${service}/${method} ended without a message`));
          settled = true;
        });
      });
    },
    async close() {
      for (const c of clients.values()) c.close();
      await server.close();
    },
  };
}

/** Metadata with an `authorization` header (or none). */
export function bearerMd(token?: string, extra: Record<string, string> = {}): grpc.Metadata {
  const md = new grpc.Metadata();
  if (token !== undefined) md.set("authorization", `Bearer ${token}`);
  for (const [k, v] of Object.entries(extra)) md.set(k, v);
  return md;
}
