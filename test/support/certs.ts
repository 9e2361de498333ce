import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

export interface TestCerts {
  dir: string;
  /** The private CA every legitimate certificate chains to. */
  ca: string;
  server: { cert: string; key: string };
  client: { cert: string; key: string };
  /** A client certificate from a CA core does not trust (the hostile caller). */
  rogueClient: { cert: string; key: string };
  /** File paths of the above, for settings. */
  files: {
    ca: string;
    serverCert: string;
    serverKey: string;
    clientCert: string;
    clientKey: string;
    rogueClientCert: string;
    rogueClientKey: string;
  };
  remove(): Promise<void>;
}

/**
 * A throwaway PKI made with the `openssl` CLI: a CA, a server certificate for
 * 127.0.0.1/localhost and a client certificate it signed, plus a rogue CA's client
 * certificate. P-256 keys, valid for one day.
 */
export async function makeTestCerts(): Promise<TestCerts> {
  const dir = await mkdtemp(join(tmpdir(), "vaultgate-certs-"));
  const f = (name: string) => join(dir, name);
  const ssl = (...args: string[]) => run("openssl", args, { cwd: dir });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  const makeCa = (name: string, cn: string) =>
    ssl(
      "req",
      "-x509",
      ...ec,
      "-keyout",
      f(`${name}.key`),
      "-out",
      f(`${name}.pem`),
      "-days",
      "1",
      "-subj",
      `/CN=${cn}`,
      "-addext",
      "basicConstraints=critical,CA:TRUE",
      "-addext",
      "keyUsage=critical,keyCertSign,cRLSign",
    );
  const makeLeaf = async (name: string, cn: string, ca: string, ext: string) => {
    await writeFile(f(`${name}.ext`), ext);
    await ssl("req", ...ec, "-keyout", f(`${name}.key`), "-out", f(`${name}.csr`), "-subj", `/CN=${cn}`);
    await ssl(
      "x509",
      "-req",
      "-in",
      f(`${name}.csr`),
      "-CA",
      f(`${ca}.pem`),
      "-CAkey",
      f(`${ca}.key`),
      "-set_serial",
      String(Date.now()),
      "-days",
      "1",
      "-out",
      f(`${name}.pem`),
      "-extfile",
      f(`${name}.ext`),
    );
  };
  await makeCa("ca", "Vaultgate Test CA");
  await makeCa("rogue-ca", "Rogue CA");
  await makeLeaf("server", "core", "ca", "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
  await makeLeaf("client", "gateway", "ca", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n");
  await makeLeaf("rogue-client", "gateway", "rogue-ca", "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n");
  const read = (name: string) => readFile(f(name), "utf8");
  return {
    dir,
    ca: await read("ca.pem"),
    server: { cert: await read("server.pem"), key: await read("server.key") },
    client: { cert: await read("client.pem"), key: await read("client.key") },
    rogueClient: { cert: await read("rogue-client.pem"), key: await read("rogue-client.key") },
    files: {
      ca: f("ca.pem"),
      serverCert: f("server.pem"),
      serverKey: f("server.key"),
      clientCert: f("client.pem"),
      clientKey: f("client.key"),
      rogueClientCert: f("rogue-client.pem"),
      rogueClientKey: f("rogue-client.key"),
    },
    remove: () => rm(dir, { recursive: true, force: true }),
  };
}

/**
 * Server certificates for 127.0.0.1 from `certs`' CA whose validity is over (2020) or not begun
 * (2030): `openssl ca` is the one command here that sets both dates.
 */
export async function makeDatedServerCerts(certs: TestCerts): Promise<{ expired: string; notYetValid: string }> {
  const f = (name: string) => join(certs.dir, name);
  const ssl = (...args: string[]) => run("openssl", args, { cwd: certs.dir });
  await writeFile(f("index.txt"), "");
  await writeFile(f("serial"), "1000\n");
  await writeFile(
    f("ca.cnf"),
    "[ca]\ndefault_ca=test\n[test]\ndatabase=index.txt\nserial=serial\nnew_certs_dir=.\ndefault_md=sha256\npolicy=any\nunique_subject=no\n" +
      "[any]\ncommonName=supplied\n[leaf]\nbasicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
  );
  const dated = async (name: string, start: string, end: string) => {
    const args = ["-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key", "-in", "server.csr", "-extensions", "leaf"];
    await ssl("ca", ...args, "-out", f(`${name}.pem`), "-startdate", start, "-enddate", end);
    return readFile(f(`${name}.pem`), "utf8");
  };
  return {
    expired: await dated("expired-server", "20200101000000Z", "20210101000000Z"),
    notYetValid: await dated("future-server", "20300101000000Z", "20310101000000Z"),
  };
}
