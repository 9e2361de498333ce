import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect } from "chai";
import { createLogger, LOG_BUFFER_BYTES, LOG_FLUSH_MS, logDestination } from "../../cli/logger.js";

/** The service's log destination: buffered info lines, warnings at once. */
describe("logger: buffered destination", () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "vaultgate-log-"));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  const read = (file: string) =>
    readFileSync(file, "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => JSON.parse(l) as { msg: string; level: number });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it("keeps info lines in the buffer, then writes them by its timer", async () => {
    const file = join(dir, "timer.log");
    const logger = createLogger("info", logDestination(file));
    logger.info("first");
    logger.info("second");
    expect(read(file)).to.deep.equal([]);
    const deadline = Date.now() + 20 * LOG_FLUSH_MS;
    while (read(file).length < 2 && Date.now() < deadline) await sleep(LOG_FLUSH_MS / 4);
    expect(read(file).map((l) => l.msg)).to.deep.equal(["first", "second"]);
  });

  it("writes a warning at once, with every line before it, in order", () => {
    const file = join(dir, "warn.log");
    const logger = createLogger("info", logDestination(file));
    logger.info("before");
    logger.warn("careful");
    expect(read(file).map((l) => l.msg)).to.deep.equal(["before", "careful"]);
    logger.info("after");
    logger.error("broken");
    expect(read(file).map((l) => l.msg)).to.deep.equal(["before", "careful", "after", "broken"]);
  });

  it("writes as soon as a buffer's worth of lines is there", () => {
    const file = join(dir, "full.log");
    const logger = createLogger("info", logDestination(file));
    const line = "x".repeat(200);
    let n = 0;
    while (read(file).length === 0 && n < 1000) logger.info({ n: n++ }, line);
    // The first write came once the lines reached the buffer's size, not line by line.
    expect(n * line.length).to.be.at.least(LOG_BUFFER_BYTES * 0.5);
    expect(n * line.length).to.be.at.most(LOG_BUFFER_BYTES * 2);
  });

  it("writes what is in the buffer when the process dies of an uncaught exception", async () => {
    const file = join(dir, "crash.log");
    const child = fileURLToPath(new URL("../support/log-crash-child.ts", import.meta.url));
    const code = await new Promise<number | null>((resolve) =>
      execFile(process.execPath, ["--import", "tsx", child, file], (err) => resolve(err ? ((err as { code?: number }).code ?? null) : 0)),
    );
    expect(code).to.equal(1);
    expect(read(file).map((l) => l.msg)).to.deep.equal(["before the crash", "still before the crash"]);
  });
});
