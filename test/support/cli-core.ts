import { startCoreServer, type CoreServer } from "../../core/server.js";
import { startStack, type StackOptions, type TestStack } from "./stack.js";

/**
 * Inside a describe: a stack and its core on a real port, made before its tests and closed after them, with the
 * environment an operator's `vaultgate` process needs to reach it (CORE_URL, ADMIN_TOKEN).
 */
export function cliCoreSuite(options: StackOptions = { webhookPollMs: 0 }): { readonly stack: TestStack; readonly env: Record<string, string> } {
  let stack: TestStack | undefined;
  let server: CoreServer | undefined;
  before(async () => {
    stack = await startStack(options);
    server = await startCoreServer(stack.core, 0, "127.0.0.1");
  });
  after(async () => {
    await server?.close();
    await stack?.close();
  });
  return {
    get stack() {
      return stack!;
    },
    get env() {
      return { CORE_URL: server!.url, ADMIN_TOKEN: stack!.adminToken };
    },
  };
}
