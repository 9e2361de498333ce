import { expect } from "chai";
import { spawn } from "node:child_process";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { createScratchDatabase } from "../support/db.js";
import { startServiceProcess, tempDataDir, type ServiceProcess } from "../support/process.js";
import { freePort } from "../support/ports.js";

const root = fileURLToPath(new URL("../../", import.meta.url));

/**
 * The README quick start as written: every ```sh block marked `<!-- readme-test -->` runs in
 * order in one bash against a real `vaultgate serve`, using only variables a user would have.
 */
describe("README quick start (real process, blocks as written)", function () {
  this.timeout(300_000);
  let dir: Awaited<ReturnType<typeof tempDataDir>>;
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  let service: ServiceProcess | undefined;
  let env: Record<string, string>;

  before(async () => {
    dir = await tempDataDir();
    scratch = await createScratchDatabase();
    const [port, corePort] = [await freePort(), await freePort()];
    env = {
      DATA_DIR: dir.path,
      PORT: String(port),
      CORE_PORT: String(corePort),
      BASE_URL: `http://127.0.0.1:${port}`,
      ...(scratch ? { DATABASE_URL: scratch.url } : {}),
    };
    service = await startServiceProcess("all", env);
  });

  after(async () => {
    await service?.stop();
    await scratch?.drop();
    await dir?.remove();
  });

  it("marks the quick start's shell blocks as runnable", async () => {
    const blocks = readmeBlocks(await readFile(`${root}README.md`, "utf8"));
    expect(blocks.length).to.be.at.least(6);
    // The service's address appears once, as BASE's default; everything else goes through $BASE.
    expect(blocks.join("\n").match(/localhost|127\.0\.0\.1/g)).to.deep.equal(["127.0.0.1"]);
    // biome-ignore lint/suspicious/noTemplateCurlyInString: the README's shell text, parameter expansion and all
    expect(blocks[0]).to.contain('BASE="${BASE_URL:-http://127.0.0.1:8080}"');
  });

  it("runs every marked block in order; each exits 0 and the API calls answer JSON", async () => {
    const blocks = readmeBlocks(await readFile(`${root}README.md`, "utf8"));
    // The last element is empty so that the script ends with a newline.
    const script = ["set -eo pipefail", ...blocks.flatMap((b, i) => [`printf '\\n@@step ${i + 1}@@\\n'`, b]), "printf '\\n@@done@@\\n'", ""].join("\n");
    const run = await bash(script, env);
    const steps = run.stdout.split(/\n@@step \d+@@\n/).slice(1);
    const reached = steps.length;
    const failure = `step ${reached} failed (exit ${run.code}):\n--- block ---\n${blocks[reached - 1] ?? ""}\n--- stdout ---\n${run.stdout}\n--- stderr ---\n${run.stderr}`;
    expect(run.code, failure).to.equal(0);
    expect(run.stdout, failure).to.match(/@@done@@\n$/);
    const out = (i: number) => steps[i - 1]!.replace(/\n@@done@@\n$/, "").trim();

    // 1: the partner's credentials reached the shell.
    expect(out(1)).to.match(/^partner gpc_acme_[0-9a-f]{8}$/);
    // 3: the consent the CLI printed covers the partner scopes.
    const consent = lastJson(out(3));
    expect(consent.scopes).to.include("kyc:read");
    // 4: the partner API answered 200 (curl -f) with the user's KYC status.
    const kyc = lastJson(out(4));
    expect(kyc).to.include({ user_id: consent.user_id, status: "not_started", provider: null });
    // 5: the MCP tool answered with the funded balance.
    const rpc = lastJson(out(5));
    expect(rpc).to.deep.include({ jsonrpc: "2.0", id: 1 });
    expect(rpc.result).to.include({ balance_cents: 5000, currency: "USD" });
    // 6: the OpenAPI document.
    expect(out(6)).to.equal("Vaultgate partner API");
  });
});

function readmeBlocks(readme: string): string[] {
  return [...readme.matchAll(/<!-- readme-test -->\s*\n```sh\n([\s\S]*?)\n```/g)].map((m) => m[1]!);
}

/** The last line of a step's output that is a JSON object. */
function lastJson(output: string): Record<string, unknown> {
  const lines = output.split("\n").filter((l) => l.trim().startsWith("{"));
  expect(lines, `no JSON in:\n${output}`).to.not.be.empty;
  const last = lines.at(-1)!;
  // A CLI answer is pretty-printed over several lines; curl's is one line.
  try {
    return JSON.parse(last) as Record<string, unknown>;
  } catch {
    return JSON.parse(output.slice(output.lastIndexOf("\n{") + 1)) as Record<string, unknown>;
  }
}

function bash(script: string, env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn("bash", ["--noprofile", "--norc", "-c", script], { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.once("error", reject);
    child.once("close", (code) => resolve({ code, stdout, stderr }));
  });
}
