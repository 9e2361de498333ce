import { once } from "node:events";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import knexFactory, { type Knex } from "knex";
import { parse } from "pg-connection-string";
import { ConfigError, loadConfig } from "../../cli/config.js";
import { connectionFromUrl } from "../../core/db/database-url.js";
import { applyMigrations, migrationLines, NO_TLS_MESSAGE, tlsRefused } from "../../cli/migrate.js";
import { ACQUIRE_FAILED, createDb } from "../../core/db/knex.js";
import { createScratchDatabase } from "../support/db.js";
import { thrownBy, thrownNow } from "../support/refusals.js";
import { freePort } from "../support/ports.js";

type Step = { name: string; up(knex: Knex): unknown };

/** What the CLI relies on in knex's and pg's behaviour, pinned against the installed versions. */
describe("knex's and pg's failures, as the CLI reads them", function () {
  this.timeout(60_000);
  let scratch: Awaited<ReturnType<typeof createScratchDatabase>>;
  before(async () => {
    scratch = await createScratchDatabase();
  });
  after(async () => {
    await scratch?.drop();
  });

  /** Runs `steps` as knex migrations (table `tableName`) after `setup`, through the CLI's sink; returns what knex threw and what got through. */
  async function migrate(tableName: string, steps: Step[], setup: string[] = []) {
    const forwarded: string[] = [];
    const written: string[] = [];
    const lines = migrationLines((line) => forwarded.push(line));
    const warn = (line: string) => {
      written.push(line);
      lines.warn(line);
    };
    const db = createDb(scratch ? { url: scratch.url, warn } : { warn });
    try {
      for (const sql of setup) await db.raw(sql);
      const source: Knex.MigrationSource<Step> = {
        getMigrations: async () => steps,
        getMigrationName: (s) => s.name,
        getMigration: async (s) => ({ up: (k: Knex) => s.up(k) as Promise<void>, down: async () => {} }),
      };
      const err = await lines
        .during(() => db.migrate.latest({ migrationSource: source, tableName }))
        .then(
          () => undefined,
          (e: unknown) => e as Error,
        );
      return { err, forwarded, written };
    } finally {
      await db.destroy();
    }
  }

  it("a migration that throws: knex writes lines about it, none gets through, and its error is what was thrown", async () => {
    const res = await migrate("wording_throws", [
      { name: "0001-fine", up: (k) => k.raw("CREATE TABLE wording_fine (a int)") },
      {
        name: "0002-throws",
        up: async () => {
          throw new Error("boom");
        },
      },
    ]);
    expect(res.err?.message).to.equal("boom");
    expect(res.written).to.include('migration file "0002-throws" failed');
    expect(res.forwarded).to.deep.equal([]);
  });

  it("a statement that fails: knex's 'statement - reason' message still ends with the database's reason", async () => {
    const res = await migrate(
      "wording_sql",
      [{ name: "0001-clash", up: (k) => k.raw("CREATE TABLE wording_clash (a int)") }],
      ["CREATE TABLE wording_clash (b int)"],
    );
    expect(res.forwarded).to.deep.equal([]);
    expect(res.err?.message).to.match(/ - relation "wording_clash" already exists$/);
  });

  it("the real migrations: the failure the CLI reports is the migration's name and the database's reason", async () => {
    const lines = migrationLines(() => {});
    const own = scratch ? await createScratchDatabase() : undefined;
    const db = createDb(own ? { url: own.url, warn: lines.warn } : { warn: lines.warn });
    try {
      await db.raw("CREATE TABLE partners (x int)");
      const err = (await thrownBy(applyMigrations(db, lines))) as Error;
      expect(err.message).to.equal('migration 0001-platform failed: relation "partners" already exists');
    } finally {
      await db.destroy();
      await own?.drop();
    }
  });

  it("a lock left held: knex throws MigrationLocked (read by name, not wording) and none of its lines gets through", async () => {
    const res = await migrate(
      "wording_locked",
      [{ name: "0001-fine", up: (k) => k.raw("SELECT 1") }],
      ["CREATE TABLE wording_locked_lock (index serial PRIMARY KEY, is_locked integer)", "INSERT INTO wording_locked_lock (is_locked) VALUES (1)"],
    );
    expect(res.err?.name).to.equal("MigrationLocked");
    expect(res.written).to.have.length.above(0);
    expect(res.forwarded).to.deep.equal([]);
  });

  it("a warning written during a run that succeeds still goes through", async () => {
    const res = await migrate("wording_sync", [{ name: "0001-sync", up: () => undefined }]);
    expect(res.err).to.equal(undefined);
    expect(res.forwarded).to.deep.equal(["migration 0001-sync did not return a promise"]);
  });

  it("a connection that cannot be opened: knex warns with the prefix createDb drops, and createDb's sink gets nothing", async () => {
    const port = await freePort();
    const url = `postgres://ops:secret-pw@127.0.0.1:${port}/vaultgate`;
    const written: string[] = [];
    const plain = knexFactory({ client: "pg", connection: url, pool: { min: 0, max: 1 }, log: { warn: (m: string) => written.push(m) } });
    await thrownBy(plain.raw("select 1")).finally(() => plain.destroy());
    expect(written.map((m) => m.slice(0, ACQUIRE_FAILED.length))).to.deep.equal([ACQUIRE_FAILED]);
    const sunk: string[] = [];
    const db = createDb({ url, warn: (line) => sunk.push(line) });
    await thrownBy(db.raw("select 1")).finally(() => db.destroy());
    expect(sunk).to.deep.equal([]);
  });

  it("a server that answers the TLS request with no: pg's error is the message the CLI explains", async () => {
    const server = createServer((socket) => socket.once("data", () => socket.end("N")));
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    const url = `postgres://ops@127.0.0.1:${(server.address() as AddressInfo).port}/vaultgate?sslmode=require`;
    const db = createDb({ url, warn: () => {} });
    try {
      const err = (await thrownBy(db.raw("select 1"))) as Error;
      expect(err.message).to.equal(NO_TLS_MESSAGE);
      expect(tlsRefused(err, url)?.message).to.match(/^the database server at DATABASE_URL \(127\.0\.0\.1:\d+\/vaultgate\) does not accept TLS: /);
    } finally {
      await db.destroy();
      server.close();
    }
  });
});

/** DATABASE_URL's check tells an unreadable ssl file from a bad URL by the installed pg-connection-string's errors. */
describe("pg-connection-string's errors, as DATABASE_URL's check classifies them", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "vaultgate-ssl-files-"));
    await writeFile(join(dir, "file.pem"), "not really a certificate\n");
    await mkdir(join(dir, "a-directory"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const check = (url: string) => thrownNow(() => loadConfig({ DATABASE_URL: url, DATA_DIR: dir })) as Error;
  const base = "postgres://ops:secret-pw@db.internal:5432/vaultgate";

  for (const param of ["sslcert", "sslkey", "sslrootcert"]) {
    // Reading a directory fails on read(2), after open(2): Node's error then names no path.
    for (const [what, path, named] of [
      ["a missing file", "missing.pem", true],
      ["a directory", "a-directory", false],
      ["a path through a file", "file.pem/inside", true],
    ] as const) {
      it(`${param} naming ${what} is an unreadable ssl file (a Node system error, with its syscall), with or without sslmode`, () => {
        const url = `${base}?${param}=${join(dir, path)}`;
        const raw = thrownNow(() => parse(url)) as { syscall?: unknown; path?: unknown };
        expect(raw.syscall).to.be.a("string");
        for (const u of [url, `${url}&sslmode=require`, `${base}?sslmode=verify-ca&${param}=${join(dir, path)}`]) {
          const err = check(u);
          expect(err).to.be.instanceOf(ConfigError);
          expect(err.message).to.match(/^DATABASE_URL names an ssl file that cannot be read: /);
          if (named) expect(err.message).to.include(join(dir, path));
          expect(err.message).to.not.include("secret-pw");
        }
      });
    }
  }

  it("a malformed URL is a bad URL (no system call), never an ssl file, even with an ssl file named", () => {
    for (const url of [
      "postgres://ops:secret-pw@db.internal:54e2/vaultgate",
      "postgres://ops:se#cret-pw@10.0.0.1/vaultgate",
      "postgres://ops:secret-pw@[::1",
      `postgres://ops:secret-pw@db.internal:99999/vaultgate?sslrootcert=${join(dir, "missing.pem")}`,
    ]) {
      const raw = thrownNow(() => parse(url)) as { syscall?: unknown };
      expect(raw.syscall, url).to.equal(undefined);
      const err = check(url);
      expect(err).to.be.instanceOf(ConfigError);
      expect(err.message, url).to.match(/^DATABASE_URL is not a valid URL \(/);
    }
  });

  it("readable files and any sslmode pass the check, and the URL is kept as written (sslmode included)", () => {
    for (const mode of ["disable", "no-verify", "prefer", "require", "verify-ca", "verify-full"]) {
      const url = `${base}?sslmode=${mode}&sslrootcert=${join(dir, "file.pem")}&sslcert=${join(dir, "file.pem")}&sslkey=${join(dir, "file.pem")}`;
      expect(loadConfig({ DATABASE_URL: url, DATA_DIR: dir }).databaseUrl).to.equal(url);
    }
  });
});

/** The driver's settings DATABASE_URL gives: the installed parser's, except sslmode, whose meaning is ours. */
describe("DATABASE_URL read for the driver (connectionFromUrl)", () => {
  const base = "postgres://ops:secret-pw@db.internal:5432/vaultgate";

  it("an IPv6 literal host loses its brackets; ?host= still wins", () => {
    expect(connectionFromUrl("postgres://ops@[::1]:5433/vaultgate")).to.include({ host: "::1", port: "5433", database: "vaultgate" });
    expect(connectionFromUrl("postgres://ops@[fd00::2]/vaultgate?host=10.0.0.1").host).to.equal("10.0.0.1");
  });

  it("sslmode as docs/configuration.md says, with no warning, whatever uselibpqcompat says", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.message);
    process.on("warning", onWarning);
    try {
      for (const mode of ["prefer", "require", "verify-ca", "verify-full", "allow"]) {
        for (const extra of ["", "&uselibpqcompat=true"]) expect(connectionFromUrl(`${base}?sslmode=${mode}${extra}`).ssl, mode).to.deep.equal({});
      }
      expect(connectionFromUrl(`${base}?sslmode=no-verify`).ssl).to.deep.equal({ rejectUnauthorized: false });
      expect(connectionFromUrl(`${base}?ssl=true&sslmode=disable`).ssl).to.equal(false);
      // Keys are read as the URL's query is: percent-encoded, and the last one given wins.
      expect(connectionFromUrl(`${base}?ssl%6Dode=disable&sslmode=require#x`).ssl).to.deep.equal({});
      expect(connectionFromUrl(`${base}?sslmode=require&ssl%6Dode=disable`).ssl).to.equal(false);
      expect(connectionFromUrl(`${base}?sslmode=&application_name=vg`))
        .to.include({ application_name: "vg" })
        .and.not.have.property("ssl");
      expect(connectionFromUrl(base)).to.not.have.property("ssl");
      // A process warning is emitted on a later tick.
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off("warning", onWarning);
    }
    expect(warnings).to.deep.equal([]);
  });
});
