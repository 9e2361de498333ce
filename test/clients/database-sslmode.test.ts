import { once } from "node:events";
import { createServer, type AddressInfo, type Server } from "node:net";
import { TLSSocket } from "node:tls";
import { expect } from "chai";
import { createDb } from "../../core/db/knex.js";
import { makeTestCerts, type TestCerts } from "../support/certs.js";
import { thrownBy } from "../support/refusals.js";
import { runCli, tempDataDir } from "../support/process.js";

/**
 * A PostgreSQL server's first answer to the driver's SSLRequest: "S" then a TLS handshake with
 * the test CA's certificate for 127.0.0.1, or "N" (no TLS). It ends the session after the handshake.
 */
async function fakeServer(answer: "S" | "N", certs: TestCerts, host = "127.0.0.1"): Promise<Server & { port: number }> {
  const server = createServer((socket) => {
    socket.once("data", () => {
      socket.write(answer);
      if (answer === "N") return;
      const tls = new TLSSocket(socket, { isServer: true, cert: certs.server.cert, key: certs.server.key });
      tls.on("error", () => {});
      tls.once("secure", () => tls.destroy());
    });
    socket.on("error", () => {});
  });
  server.listen(0, host);
  await once(server, "listening");
  return Object.assign(server, { port: (server.address() as AddressInfo).port });
}

const WARNING = /SECURITY WARNING|uselibpqcompat|libpq|Warning:/;

/**
 * sslmode in DATABASE_URL means what docs/configuration.md says (every mode but disable and
 * no-verify checks the certificate and the host name), and no command prints the parser's warning.
 */
describe("DATABASE_URL sslmode: verified TLS, no library warning (real driver and processes)", function () {
  this.timeout(60_000);
  let certs: TestCerts;
  let tlsServer: Server & { port: number };
  let plainServer: Server & { port: number };
  // 127.0.0.2 is this machine too, but not a name on the certificate.
  let otherNameServer: Server & { port: number };
  before(async () => {
    certs = await makeTestCerts();
    tlsServer = await fakeServer("S", certs);
    plainServer = await fakeServer("N", certs);
    otherNameServer = await fakeServer("S", certs, "127.0.0.2");
  });
  after(async () => {
    tlsServer?.close();
    plainServer?.close();
    otherNameServer?.close();
    await certs?.remove();
  });

  const connect = async (host: string, port: number, query: string) => {
    const db = createDb({ url: `postgres://ops:secret-pw@${host}:${port}/vaultgate?${query}`, warn: () => {} });
    try {
      return (await thrownBy(db.raw("select 1"))) as Error & { code?: string };
    } finally {
      await db.destroy();
    }
  };

  for (const mode of ["prefer", "require", "verify-ca", "verify-full"]) {
    it(`sslmode=${mode}: a certificate from a CA the operator did not name is refused; sslrootcert's CA is accepted for its host name only`, async () => {
      const untrusted = await connect("127.0.0.1", tlsServer.port, `sslmode=${mode}`);
      expect(untrusted.code, untrusted.message).to.equal("UNABLE_TO_VERIFY_LEAF_SIGNATURE");
      const trusted = await connect("127.0.0.1", tlsServer.port, `sslmode=${mode}&sslrootcert=${certs.files.ca}`);
      expect(trusted.message).to.match(/Connection terminated unexpectedly/);
      const otherName = await connect("127.0.0.2", otherNameServer.port, `sslmode=${mode}&sslrootcert=${certs.files.ca}`);
      expect(otherName.code, otherName.message).to.equal("ERR_TLS_CERT_ALTNAME_INVALID");
    });
  }

  it("sslmode=prefer never falls back to cleartext; no-verify skips the check; uselibpqcompat changes nothing; sslrootcert alone verifies", async () => {
    expect((await connect("127.0.0.1", plainServer.port, "sslmode=prefer")).message).to.equal("The server does not support SSL connections");
    expect((await connect("127.0.0.1", tlsServer.port, "sslmode=no-verify")).message).to.match(/Connection terminated unexpectedly/);
    expect((await connect("127.0.0.1", tlsServer.port, "uselibpqcompat=true&sslmode=require")).code).to.equal("UNABLE_TO_VERIFY_LEAF_SIGNATURE");
    // No sslmode but a CA file: verified TLS too.
    expect((await connect("127.0.0.2", otherNameServer.port, `sslrootcert=${certs.files.ca}`)).code).to.equal("ERR_TLS_CERT_ALTNAME_INVALID");
  });

  it("a command that never opens the database prints no driver warning about sslmode", async () => {
    const dir = await tempDataDir();
    try {
      for (const mode of ["prefer", "require", "verify-ca"]) {
        const url = `postgres://ops:secret-pw@127.0.0.1:${tlsServer.port}/vaultgate?sslmode=${mode}`;
        // Port 9 on loopback: no core there, so the command fails after reading its settings.
        const res = await runCli(["partner", "list"], { DATA_DIR: dir.path, DATABASE_URL: url, CORE_URL: "http://127.0.0.1:9", ADMIN_TOKEN: "a".repeat(32) });
        expect(res.code, res.stderr).to.equal(1);
        expect(res.stderr).to.match(/^vaultgate: [^\n]*\n$/);
        expect(res.stderr).to.not.match(WARNING);
      }
      const help = await runCli(["help", "serve"], { DATABASE_URL: `postgres://ops@127.0.0.1:${tlsServer.port}/vaultgate?sslmode=require` });
      expect(help.code).to.equal(0);
      expect(help.stderr).to.equal("");
    } finally {
      await dir.remove();
    }
  });

  it("migrate, which connects, prints no driver warning either: only why the connection failed", async () => {
    const dir = await tempDataDir();
    try {
      const url = `postgres://ops:secret-pw@127.0.0.1:${tlsServer.port}/vaultgate?sslmode=require`;
      const res = await runCli(["migrate"], { DATA_DIR: dir.path, DATABASE_URL: url });
      expect(res.code, res.stderr).to.equal(1);
      expect(res.stdout).to.equal("");
      expect(res.stderr).to.not.match(WARNING);
      expect(res.stderr).to.include("unable to verify the first certificate");
      expect(res.stderr).to.not.include("secret-pw");
    } finally {
      await dir.remove();
    }
  });
});
