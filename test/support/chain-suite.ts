import { ownDatabase } from "./db.js";
import { startEvmChain, type EvmChain } from "./evm-rail.js";
import { startMcpStack, type McpStack } from "./mcp.js";

/**
 * Inside a describe: anvil with USDC and a database of the suite's own (made before its tests, gone after them),
 * and cores on both that a test starts and stops at will; whatever a test left running closes after it.
 */
export function chainSuite() {
  let chain: EvmChain | undefined;
  let books: Awaited<ReturnType<typeof ownDatabase>> | undefined;
  const running: McpStack[] = [];
  before(async () => {
    books = await ownDatabase();
    chain = await startEvmChain();
  });
  afterEach(async () => {
    await Promise.all(running.splice(0).map((s) => s.close()));
    await chain?.anvil.setAutomine(true);
  });
  after(async () => {
    await chain?.anvil.stop();
    await books?.drop();
  });
  return {
    get chain() {
      return chain!;
    },
    get books() {
      return books!;
    },
    /** A core on the suite's database; its worker moves only when the test calls runOnce. */
    async start(options: Parameters<typeof startMcpStack>[0]): Promise<McpStack> {
      const s = await startMcpStack({ settlementPollMs: 0, ...options, database: books!.db });
      running.push(s);
      return s;
    },
    /** Stops a core before the test ends (a core going away). */
    async stop(s: McpStack): Promise<void> {
      running.splice(running.indexOf(s), 1);
      await s.close();
    },
  };
}
