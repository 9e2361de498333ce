import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { startStack, type TestStack } from "../support/stack.js";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../..", import.meta.url));
const page = readFileSync(join(root, "docs/reference/core-grpc.md"), "utf8");

/** The fenced block of `lang` that follows `after` on the core gRPC reference page. */
function docBlock(after: string, lang: string): string {
  const rest = page.slice(page.indexOf(after));
  const fence = "```";
  const m = new RegExp(`${fence}${lang}\\n([\\s\\S]*?)${fence}`).exec(rest);
  if (page.indexOf(after) < 0 || !m) throw new Error(`no ${lang} block after "${after}" in core-grpc.md`);
  return m[1]!;
}

/**
 * A developer's own client, made as the reference page says: its `buf generate` command on a copy
 * of the protos, then its example program through Connect against a real core on a real port.
 */
describe("a client generated with buf from the reference page's commands", function () {
  this.timeout(120_000);
  let stack: TestStack;
  let server: CoreServer;
  let dir: string;

  before(async () => {
    stack = await startStack();
    server = await startCoreServer(stack.core, 0);
    dir = mkdtempSync(join(tmpdir(), "vaultgate-client-gen-"));
    cpSync(join(root, "proto"), join(dir, "proto"), { recursive: true });
    cpSync(join(root, "buf.yaml"), join(dir, "buf.yaml"));
    symlinkSync(join(root, "node_modules"), join(dir, "node_modules"));
    writeFileSync(join(dir, "package.json"), JSON.stringify({ type: "module", private: true }));
    await run("sh", ["-c", docBlock("To generate a client in your language", "sh")], { cwd: dir });
    const program = docBlock("and call core with it through Connect", "ts").replace("http://127.0.0.1:8081", server.url);
    expect(program, "the example names the default core address").to.include(server.url);
    writeFileSync(join(dir, "client.ts"), program);
  });
  after(async () => {
    if (dir) rmSync(dir, { recursive: true, force: true });
    await server?.close();
    await stack?.close();
  });

  const client = async (adminToken: string) =>
    (await run(process.execPath, ["--import", "tsx", "client.ts"], { cwd: dir, env: { ...process.env, ADMIN_TOKEN: adminToken } })).stdout.trim();

  it("type-checks as strict TypeScript under Node's own ESM resolution", async () => {
    const flags = ["--noEmit", "--strict", "--skipLibCheck", "--module", "nodenext", "--moduleResolution", "nodenext", "--target", "es2022"];
    await run("npx", ["tsc", ...flags, "client.ts"], { cwd: dir });
  });

  it("lists audit records with the operator's token", async () => {
    await stack.admin.partners.createUser({ email: `buf-${randomUUID()}@example.test` });
    expect(await client(stack.adminToken)).to.match(/^[1-5] records$/);
  });

  it("hostile: with a wrong token it is refused, and the generated error detail names the reason", async () => {
    expect(await client("0".repeat(32))).to.equal("refused: ADMIN_UNAUTHENTICATED");
  });
});
