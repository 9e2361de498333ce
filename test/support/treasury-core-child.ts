/**
 * A real core process with the treasury fault seam armed, so the crash test can kill -9 it mid-batch:
 * `node --import tsx treasury-core-child.ts <db-url> <admin-token> <before-commit|after-commit>`; prints {"url"}, then {"paused"}.
 */
import pino from "pino";
import { createCore } from "../../core/core.js";
import { startCoreServer } from "../../core/server.js";

const [url, adminToken, stage] = process.argv.slice(2);
if (!url || !adminToken || (stage !== "before-commit" && stage !== "after-commit")) {
  process.stderr.write("usage: treasury-core-child.ts <database-url> <admin-token> <before-commit|after-commit>\n");
  process.exit(2);
}

const pause = async (batchId: string) => {
  process.stdout.write(`${JSON.stringify({ paused: batchId })}\n`);
  // Hold here (transaction open, or committed but unanswered) until killed.
  await new Promise(() => {});
};

const core = await createCore({
  db: { url },
  logger: pino({ level: "silent" }),
  adminToken,
  issuer: "http://vaultgate.test",
  partnerAudience: "urn:vaultgate:partner-api",
  // The parent's keys outside the database: a core with others refuses this database.
  webhookSecretKey: process.env.WEBHOOK_SECRET_KEY,
  signinCodeKey: process.env.SIGNIN_CODE_KEY,
  treasuryFaults: stage === "before-commit" ? { beforeCommit: pause } : { afterCommit: pause },
});
const server = await startCoreServer(core, 0);
process.stdout.write(`${JSON.stringify({ url: server.url })}\n`);
