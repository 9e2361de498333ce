/**
 * Child process of test/unit/logger-buffer.test.ts: logs info lines to the file named by
 * its argument through the service's buffered destination, then dies of an uncaught
 * exception before the buffer's timer could write them.
 */
import { createLogger, logDestination } from "../../cli/logger.js";

const logger = createLogger("info", logDestination(process.argv[2]!));
logger.info("before the crash");
logger.info({ n: 2 }, "still before the crash");
throw new Error("deliberate crash");
