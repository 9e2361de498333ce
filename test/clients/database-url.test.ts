import { once } from "node:events";
import { createServer, type AddressInfo, type Server } from "node:net";
import { TLSSocket } from "node:tls";
import { expect } from "chai";
import { makeDatedServerCerts, makeTestCerts, type TestCerts } from "../support/certs.js";
import { createScratchDatabase, requirePostgres } from "../support/db.js";
import { runCli, tempDataDir } from "../support/process.js";
import { freePort } from "../support/ports.js";

/** A PostgreSQL server's first answer to the driver's TLS request: "N" (no TLS), or "S" and a handshake with `certs` (`cert` instead of its own). */
async function tlsAnswering(host: string, certs?: TestCerts, cert?: string): Promise<Server & { port: number }> {
  const server = createServer((socket) => {
    socket.on("error", () => {});
    socket.once("data", () => {
      if (!certs) return void socket.end("N");
      socket.write("S");
      const tls = new TLSSocket(socket, { isServer: true, cert: cert ?? certs.server.cert, key: certs.server.key });
      tls.on("error", () => {});
    });
  });
  server.listen(0, host);
  await once(server, "listening");
  return Object.assign(server, { port: (server.address() as AddressInfo).port });
}

/** `command` with DATABASE_URL `url` in a fresh DATA_DIR. */
async function run(command: "migrate" | "serve", url: string) {
  const dir = await tempDataDir();
  try {
    return await runCli([command], { DATA_DIR: dir.path, DATABASE_URL: url, PORT: "0", CORE_PORT: "0", LOG_LEVEL: "info" });
  } finally {
    await dir.remove();
  }
}

/** migrate prints nothing on stdout; serve's stdout is its JSON log, where no line may repeat the driver's failure. */
function expectNoDriverLines(command: string, stdout: string) {
  if (command === "migrate") {
    expect(stdout).to.equal("");
    return;
  }
  for (const line of stdout.split("\n").filter(Boolean)) {
    const { msg } = JSON.parse(line) as { msg: string };
    expect(msg, line).to.not.match(/Acquire connection|connection error|ECONNREFUSED|SSL|certificate/i);
  }
}

/** DATABASE_URL as an operator writes it: IPv6 hosts, TLS refusals and unreachable servers, each said once. */
describe("DATABASE_URL edges: IPv6 hosts, TLS refusals, one line per failure (real processes)", function () {
  this.timeout(120_000);
  let certs: TestCerts;
  let noTls: Server & { port: number };
  let noTlsOnIpv6: Server & { port: number };
  let untrusted: Server & { port: number };
  let expired: Server & { port: number };
  let notYetValid: Server & { port: number };
  before(async () => {
    certs = await makeTestCerts();
    noTls = await tlsAnswering("127.0.0.1");
    noTlsOnIpv6 = await tlsAnswering("::1");
    untrusted = await tlsAnswering("127.0.0.1", certs);
    const dated = await makeDatedServerCerts(certs);
    expired = await tlsAnswering("127.0.0.1", certs, dated.expired);
    notYetValid = await tlsAnswering("127.0.0.1", certs, dated.notYetValid);
  });
  after(async () => {
    for (const s of [noTls, noTlsOnIpv6, untrusted, expired, notYetValid]) s?.close();
    await certs?.remove();
  });

  it("migrate with an IPv6 literal host ([::1]) migrates over IPv6 (PostgreSQL only)", async function () {
    requirePostgres(this, "needs a PostgreSQL server listening on ::1");
    const scratch = (await createScratchDatabase())!;
    try {
      const url = new URL(scratch.url);
      url.hostname = "[::1]";
      const res = await run("migrate", url.toString());
      expect(res.code, res.stderr).to.equal(0);
      expect(res.stderr).to.equal("");
      expect((res.json as { applied: string[] }).applied).to.include("0001-platform");
    } finally {
      await scratch.drop();
    }
  });

  for (const command of ["migrate", "serve"] as const) {
    it(`${command}: an IPv6 literal host is dialled at that address (the server there is reached)`, async () => {
      const res = await run(command, `postgres://ops:secret-pw@[::1]:${noTlsOnIpv6.port}/vaultgate?sslmode=require`);
      expect(res.code).to.equal(1);
      expect(res.stderr).to.match(
        new RegExp(`^vaultgate: the database server at DATABASE_URL \\(\\[::1\\]:${noTlsOnIpv6.port}/vaultgate\\) does not accept TLS`),
      );
    });

    it(`${command}: a server without TLS under sslmode=require is one line naming DATABASE_URL and sslmode`, async () => {
      const res = await run(command, `postgres://ops:secret-pw@127.0.0.1:${noTls.port}/vaultgate?sslmode=require`);
      expect(res.code).to.equal(1);
      expectNoDriverLines(command, res.stdout);
      expect(res.stderr).to.equal(
        `vaultgate: the database server at DATABASE_URL (127.0.0.1:${noTls.port}/vaultgate) does not accept TLS: ` +
          "enable ssl on the server, or set sslmode=disable in DATABASE_URL if the connection never leaves a trusted network\n",
      );
    });

    it(`${command}: a certificate from a CA not named is one line saying to name it with sslrootcert`, async () => {
      const res = await run(command, `postgres://ops:secret-pw@127.0.0.1:${untrusted.port}/vaultgate?sslmode=verify-full`);
      expect(res.code).to.equal(1);
      expectNoDriverLines(command, res.stdout);
      expect(res.stderr).to.equal(
        `vaultgate: the database server at DATABASE_URL (127.0.0.1:${untrusted.port}/vaultgate) presented a certificate that was not verified ` +
          "(unable to verify the first certificate): name the CA that signed it with sslrootcert=<file> in DATABASE_URL\n",
      );
    });

    it(`${command}: a certificate past its dates, or before them, is one line saying what to check`, async () => {
      const trusting = (port: number) => `postgres://ops:secret-pw@127.0.0.1:${port}/vaultgate?sslmode=verify-full&sslrootcert=${certs.files.ca}`;
      const old = await run(command, trusting(expired.port));
      expect(old.code).to.equal(1);
      expectNoDriverLines(command, old.stdout);
      expect(old.stderr).to.equal(
        `vaultgate: the database server at DATABASE_URL (127.0.0.1:${expired.port}/vaultgate) presented a certificate that has expired ` +
          "(certificate has expired): renew the server's certificate, and check that this machine's clock is right\n",
      );
      const early = await run(command, trusting(notYetValid.port));
      expect(early.code).to.equal(1);
      expect(early.stderr).to.equal(
        `vaultgate: the database server at DATABASE_URL (127.0.0.1:${notYetValid.port}/vaultgate) presented a certificate that is not valid yet ` +
          "(certificate is not yet valid): check that this machine's clock is right, and the dates of the server's certificate\n",
      );
    });

    it(`${command}: an unreachable server is the CLI's one line, and no driver line beside it`, async () => {
      const port = await freePort();
      const res = await run(command, `postgres://ops:secret-pw@127.0.0.1:${port}/vaultgate`);
      expect(res.code).to.equal(1);
      expectNoDriverLines(command, res.stdout);
      expect(res.stderr).to.equal(
        `vaultgate: cannot reach the database named by DATABASE_URL (127.0.0.1:${port}/vaultgate): connect ECONNREFUSED 127.0.0.1:${port}\n`,
      );
    });
  }
});
