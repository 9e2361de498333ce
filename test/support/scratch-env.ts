import { tempDataDir } from "./process.js";

export interface ScratchEnv {
  /** This test's DATA_DIR. */
  dir: string;
  /** DATA_DIR plus any free PORT and CORE_PORT: what a `vaultgate serve` refused at start, or a CLI command, runs with. */
  env: Record<string, string>;
}

/** Registers mocha hooks giving each test a fresh temp DATA_DIR and its base env, removed after the test. */
export function useScratchEnv(): ScratchEnv {
  const handle = {} as ScratchEnv;
  let remove: (() => Promise<void>) | undefined;
  beforeEach(async () => {
    const dir = await tempDataDir();
    remove = dir.remove;
    handle.dir = dir.path;
    handle.env = { DATA_DIR: dir.path, PORT: "0", CORE_PORT: "0" };
  });
  afterEach(async () => {
    await remove?.();
    remove = undefined;
  });
  return handle;
}
