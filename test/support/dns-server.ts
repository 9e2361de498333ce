import { createSocket } from "node:dgram";

export interface TestDnsServer {
  /** `127.0.0.1:<port>`, for a resolver's `servers`. */
  address: string;
  /** Queries received so far (name and type). */
  queries: { name: string; type: number }[];
  /** Answers every query held so far (and from now on answers at once). */
  release(): void;
  close(): Promise<void>;
}

/**
 * A tiny UDP name server on 127.0.0.1 for tests: A queries for names in `records` get
 * that address, every other query an empty answer. With `hold`, queries are recorded but
 * answered only on release() (a name server that is slow or never answers).
 */
export async function startDnsServer(records: Record<string, string>, options: { hold?: boolean } = {}): Promise<TestDnsServer> {
  const socket = createSocket("udp4");
  const queries: TestDnsServer["queries"] = [];
  let holding = options.hold ?? false;
  const held: (() => void)[] = [];
  socket.on("message", (msg, peer) => {
    const { name, type, end } = question(msg);
    queries.push({ name, type });
    const ip = type === 1 ? records[name.toLowerCase()] : undefined;
    const header = Buffer.alloc(12);
    msg.copy(header, 0, 0, 2); // id
    header.writeUInt16BE(0x8180, 2); // response, recursion desired and available, no error
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(ip ? 1 : 0, 6);
    const answer = ip ? Buffer.concat([Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]), Buffer.from(ip.split(".").map(Number))]) : Buffer.alloc(0);
    const reply = Buffer.concat([header, msg.subarray(12, end), answer]);
    const send = () => socket.send(reply, peer.port, peer.address);
    if (holding) held.push(send);
    else send();
  });
  await new Promise<void>((resolve) => socket.bind(0, "127.0.0.1", resolve));
  return {
    address: `127.0.0.1:${socket.address().port}`,
    queries,
    release() {
      holding = false;
      for (const send of held.splice(0)) send();
    },
    close: () => new Promise<void>((resolve) => socket.close(() => resolve())),
  };
}

function question(msg: Buffer): { name: string; type: number; end: number } {
  const labels: string[] = [];
  let i = 12;
  while (msg[i]! !== 0) {
    labels.push(msg.subarray(i + 1, i + 1 + msg[i]!).toString("ascii"));
    i += msg[i]! + 1;
  }
  return { name: labels.join("."), type: msg.readUInt16BE(i + 1), end: i + 5 };
}
