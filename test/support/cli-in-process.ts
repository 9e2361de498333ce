import { main } from "../../cli/main.js";

/** Runs main() in this process with stdout captured; `tty` makes stdout look like a terminal. */
export async function inProcess(argv: string[], tty: boolean): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const write = process.stdout.write.bind(process.stdout);
  const writeErr = process.stderr.write.bind(process.stderr);
  const wasTty = process.stdout.isTTY;
  process.stdout.write = ((chunk: string) => {
    out += chunk;
    return true;
  }) as typeof process.stdout.write;
  process.stderr.write = ((chunk: string) => {
    err += chunk;
    return true;
  }) as typeof process.stderr.write;
  process.stdout.isTTY = tty;
  try {
    return { code: await main(argv), out, err };
  } finally {
    process.stdout.write = write;
    process.stderr.write = writeErr;
    process.stdout.isTTY = wasTty;
  }
}
