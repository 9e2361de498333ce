import { execFile } from "node:child_process";
import { join } from "node:path";
import { promisify } from "node:util";
import { expect } from "chai";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { startStack, type TestStack } from "../support/stack.js";

const run = promisify(execFile);
const root = join(import.meta.dirname, "../..");

/** Encodes FileDescriptorProto bytes as a FileDescriptorSet (field 1, repeated, length-delimited). */
function descriptorSet(files: Buffer[]): Buffer {
  const parts: Buffer[] = [];
  for (const f of files) {
    const len: number[] = [];
    let n = f.length;
    do {
      len.push((n & 0x7f) | (n > 0x7f ? 0x80 : 0));
      n >>>= 7;
    } while (n > 0);
    parts.push(Buffer.from([0x0a, ...len]), f);
  }
  return Buffer.concat(parts);
}

/** A ServerReflectionResponse as proto-loader decodes it (keepCase, oneofs): the fields these tests read. */
interface ReflectionResponse {
  original_request: { file_containing_symbol?: string };
  list_services_response?: { service: { name: string }[] };
  file_descriptor_response?: { file_descriptor_proto: Buffer[] };
  all_extension_numbers_response?: { extension_number: number[] };
  error_response?: { error_code: number; error_message: string };
}
type ReflectionClient = grpc.Client & { ServerReflectionInfo: () => grpc.ClientDuplexStream<object, ReflectionResponse> };
type Unary<Res> = (req: object, cb: (err: grpc.ServiceError | null, res: Res) => void) => grpc.ClientUnaryCall;

/** Sends `requests` on one ServerReflectionInfo stream, half-closes it, and resolves with every response. */
function ask(reflection: ReflectionClient, requests: object[]): Promise<ReflectionResponse[]> {
  return new Promise((resolve, reject) => {
    const stream = reflection.ServerReflectionInfo();
    const out: ReflectionResponse[] = [];
    stream.on("data", (m: ReflectionResponse) => out.push(m));
    stream.on("error", reject);
    stream.on("end", () => resolve(out));
    for (const r of requests) stream.write(r);
    stream.end();
  });
}

/**
 * A client that knows nothing of Vaultgate's protos: it speaks only the reflection
 * protocol (loaded from proto/grpc/reflection), asks core for the service list and the
 * descriptors, builds a grpc-js client from what came back, and calls a method.
 */
describe("gRPC server reflection: a client with only core's address", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let server: CoreServer;
  let address: string;

  before(async () => {
    stack = await startStack({ webhookPollMs: 0 });
    server = await startCoreServer(stack.core, 0, "127.0.0.1");
    address = server.url.replace("http://", "");
  });
  after(async () => {
    await server?.close();
    await stack?.close();
  });

  for (const version of ["v1", "v1alpha"]) {
    it(`lists the services and calls GetJwks from reflected descriptors (grpc.reflection.${version}, stock grpc-js)`, async () => {
      const pkg = protoLoader.loadSync(`grpc/reflection/${version}/reflection.proto`, {
        includeDirs: [join(root, "proto")],
        keepCase: true,
        defaults: true,
        oneofs: true,
      });
      const Reflection = grpc.makeGenericClientConstructor(pkg[`grpc.reflection.${version}.ServerReflection`] as grpc.ServiceDefinition, "ServerReflection");
      const reflection = new Reflection(address, grpc.credentials.createInsecure()) as unknown as ReflectionClient;
      try {
        const [listed] = await ask(reflection, [{ list_services: "" }]);
        const names = listed!.list_services_response!.service.map((s) => s.name);
        expect(names).to.include.members([
          "grpc.health.v1.Health",
          "grpc.reflection.v1.ServerReflection",
          "grpc.reflection.v1alpha.ServerReflection",
          "vaultgate.audit.v1.AuditService",
          "vaultgate.budgets.v1.BudgetsService",
          "vaultgate.grants.v1.GrantsService",
          "vaultgate.partners.v1.PartnerResourcesService",
          "vaultgate.partners.v1.PartnersService",
          "vaultgate.treasury.v1.TreasuryService",
        ]);

        const answers = await ask(reflection, [
          { file_containing_symbol: "vaultgate.grants.v1.GrantsService" },
          { file_containing_symbol: "vaultgate.grants.v1.GrantsService.GetJwks" },
          { file_containing_symbol: "vaultgate.no.Such" },
          { file_by_filename: "no/such.proto" },
        ]);
        expect(answers).to.have.length(4);
        const files = answers[0]!.file_descriptor_response!.file_descriptor_proto;
        expect(files.length).to.be.greaterThan(1); // the service's file and its imports
        expect(answers[1]!.file_descriptor_response!.file_descriptor_proto.length).to.be.at.least(1); // a method names its service's file
        expect(answers[2]!.error_response!.error_code).to.equal(grpc.status.NOT_FOUND);
        expect(answers[3]!.error_response!.error_code).to.equal(grpc.status.NOT_FOUND);
        expect(answers[2]!.original_request.file_containing_symbol).to.equal("vaultgate.no.Such");

        // Only what reflection returned: build the client and call.
        const reflected = protoLoader.loadFileDescriptorSetFromBuffer(descriptorSet(files), { keepCase: true, defaults: true });
        const Grants = grpc.makeGenericClientConstructor(reflected["vaultgate.grants.v1.GrantsService"] as grpc.ServiceDefinition, "GrantsService");
        const grants = new Grants(address, grpc.credentials.createInsecure()) as unknown as grpc.Client & {
          GetJwks: Unary<{ jwks_json: string }>;
          RotateSigningKey: Unary<unknown>;
        };
        try {
          const res = await new Promise<{ jwks_json: string }>((resolve, reject) => grants.GetJwks({}, (err, r) => (err ? reject(err) : resolve(r))));
          expect(JSON.parse(res.jwks_json).keys.length).to.be.greaterThan(0);
          // Reflection describes; it grants nothing: an admin-only method still needs the operator credential.
          const refused = await new Promise<grpc.ServiceError>((resolve) => grants.RotateSigningKey({}, (err) => resolve(err!)));
          expect(refused?.code).to.equal(grpc.status.UNAUTHENTICATED);
        } finally {
          grants.close();
        }
      } finally {
        reflection.close();
      }
    });
  }

  it("answers file_containing_extension and all_extension_numbers_of_type for the admin_only option", async () => {
    const pkg = protoLoader.loadSync("grpc/reflection/v1/reflection.proto", {
      includeDirs: [join(root, "proto")],
      keepCase: true,
      defaults: true,
      oneofs: true,
    });
    const Reflection = grpc.makeGenericClientConstructor(pkg["grpc.reflection.v1.ServerReflection"] as grpc.ServiceDefinition, "ServerReflection");
    const reflection = new Reflection(address, grpc.credentials.createInsecure()) as unknown as ReflectionClient;
    try {
      const out = await ask(reflection, [{ all_extension_numbers_of_type: "google.protobuf.MethodOptions" }]);
      const numbers = out[0]!.all_extension_numbers_response!.extension_number;
      expect(numbers.length).to.be.at.least(1);
      const ext = await ask(reflection, [{ file_containing_extension: { containing_type: "google.protobuf.MethodOptions", extension_number: numbers[0] } }]);
      expect(ext[0]!.file_descriptor_response!.file_descriptor_proto.length).to.be.at.least(1);
    } finally {
      reflection.close();
    }
  });

  it("buf curl calls a method with no schema but the server's reflection", async () => {
    const { stdout } = await run(
      join(root, "node_modules/.bin/buf"),
      ["curl", "--http2-prior-knowledge", "--protocol", "grpc", `${server.url}/vaultgate.grants.v1.GrantsService/GetJwks`],
      { cwd: "/tmp", timeout: 30_000 },
    );
    const body = JSON.parse(stdout) as { jwksJson: string };
    expect(JSON.parse(body.jwksJson).keys.length).to.be.greaterThan(0);
  });
});
