import { expect } from "chai";
import { readFileSync } from "node:fs";
import { COMMANDS } from "../../cli/commands/registry.js";
import { inProcess } from "../support/cli-in-process.js";
import { runCli, tempDataDir, useServiceProcess } from "../support/process.js";

const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };

/** Logs every file module the process resolves to stderr ("LOADED <url>"). */
const TRACE_MODULES = [
  "--import",
  "data:text/javascript,import{register}from'node:module';register(" +
    JSON.stringify(
      "data:text/javascript,export async function resolve(s,c,n){const r=await n(s,c);if(r.url.startsWith('file:'))console.error('LOADED '+r.url);return r}",
    ) +
    ")",
];
/**
 * The database, the gateways, the chain and passkey libraries, and the RPC stack. The built CLI bundles Connect into the chunk
 * that cli/core-client.ts starts (dist/cli/core-client-<hash>.js); the sources load it from
 * node_modules. Either way the client module's own file is the marker for the RPC stack.
 */
const DATABASE_OR_GATEWAYS = /\/node_modules\/(knex|fastify|@electric-sql\/pglite|viem|@simplewebauthn)\//;
const RPC_STACK = /\/node_modules\/@connectrpc\/|\/cli\/core-client(\.ts|-\w+\.js)$/m;

describe("vaultgate CLI usability (real processes)", function () {
  this.timeout(180_000);
  const proc = useServiceProcess("all");

  it("refuses a misspelled flag with a suggestion and a short usage error, and creates nothing", async () => {
    const res = await runCli(["partner", "create", "--name", "Typo", "--entitlement", "kyc:read"], proc.env);
    expect(res.code).to.equal(2);
    expect(res.stderr).to.equal("vaultgate: unknown option --entitlement; did you mean --entitlements?\nsee 'vaultgate partner create --help'\n");
    expect(res.stdout).to.equal("");
    const list = await runCli(["partner", "list", "--all"], proc.env);
    expect((list.json!.partners as { name: string }[]).map((p) => p.name)).to.not.include("Typo");

    const cases: [string[], RegExp][] = [
      [["partnr", "list"], /^vaultgate: unknown command: partnr; did you mean partner\?\nsee 'vaultgate --help'\n$/],
      [["partner", "lst"], /unknown subcommand: partner lst; did you mean list\?/],
      [["partner", "create", "--name"], /^vaultgate: --name needs a value\nsee 'vaultgate partner create --help'\n$/],
      [["partner", "create"], /--name NAME is required/],
      [["partner", "list", "--all=yes"], /--all takes no value/],
      [["partner", "list", "--help=yes"], /^vaultgate: --help takes no value\n/],
      [["keys", "retire"], /KID is required/],
      [["keys", "rotate", "extra"], /unexpected argument "extra"/],
      [["help", "serve", "x"], /^vaultgate: unexpected argument "x"\nsee 'vaultgate help serve'\n$/],
      [["help", "partner", "create", "extra"], /^vaultgate: unexpected argument "extra"\nsee 'vaultgate help partner'\n$/],
      [["user", "set-status", "u1"], /active\|inactive is required/],
      [["partner", "create", "--name", "A", "--name=B"], /^vaultgate: --name is given more than once\nsee 'vaultgate partner create --help'\n$/],
      [["vault", "fund", "v1", "--amount-cents", "5", "--amount-cents", "500"], /--amount-cents is given more than once/],
      // An option's range is the one it takes: a page of 1 to 200, an amount of at least one cent.
      [["partner", "list", "--limit", "99999999999999999999"], /--limit must be an integer from 1 to 200/],
      [["partner", "list", "--limit", "abc"], /--limit must be an integer from 1 to 200/],
      [["partner", "list", "--limit", "0"], /--limit must be an integer from 1 to 200/],
      [["vault", "fund", "v1", "--amount-cents", "1e3"], /--amount-cents must be an integer from 1 to 9007199254740991/],
      [["vault", "fund", "v1", "--amount-cents", "0"], /--amount-cents must be an integer from 1 to 9007199254740991/],
      [["treasury", "fund", "gpc_x_00000000", "--amount-cents", "0"], /--amount-cents must be an integer from 1 to 9007199254740991/],
      [["ledger", "record", "u1", "--direction", "credit", "--amount-cents", "0"], /--amount-cents must be an integer from 1 to 9007199254740991/],
      [["dev", "chain", "--port", "0"], /--port must be an integer from 1 to 65535/],
      [["user", "set-status", "u1", "maybe"], /STATUS must be one of active\|inactive/],
      [["user", "set-kyc", "u1", "--status", "done"], /--status must be one of not_started\|pending\|approved\|rejected/],
    ];
    for (const [argv, message] of cases) {
      const r = await runCli(argv, proc.env);
      expect(r.code, argv.join(" ")).to.equal(2);
      expect(r.stdout, argv.join(" ")).to.equal("");
      expect(r.stderr, argv.join(" ")).to.match(message);
      expect(r.stderr.trimEnd().split("\n").length, argv.join(" ")).to.be.at.most(2);
    }
  });

  it("refuses serve --json as a usage error before reading any setting (nothing starts)", async () => {
    // A PORT serve cannot use: had --json been accepted, the start would fail on it (exit 1), never listen.
    const r = await runCli(["serve", "--json"], { ...proc.env, PORT: "not-a-port" });
    expect([r.code, r.stdout, r.stderr]).to.deep.equal([
      2,
      "",
      "vaultgate: serve prints no answer to format: its log is JSON lines already (LOG_LEVEL sets how much), so --json does not apply\nsee 'vaultgate serve --help'\n",
    ]);
  });

  it("prints --version, help, and help per command without loading the database, gateways or RPC stack", async () => {
    const version = await runCli(["--version"], {}, TRACE_MODULES);
    expect(version.code).to.equal(0);
    expect(version.stdout).to.equal(`${pkg.version}\n`);
    const json = await runCli(["--version", "--json"], {});
    expect([json.code, JSON.parse(json.stdout)]).to.deep.equal([0, { version: pkg.version }]);
    const extra = await runCli(["--version", "--format", "env"], {});
    expect([extra.code, extra.stdout, extra.stderr]).to.deep.equal([2, "", "vaultgate: --version takes no arguments but --json\nsee 'vaultgate --help'\n"]);
    for (const argv of [
      ["--version"],
      ["--help"],
      ["-h"],
      ["help"],
      ["help", "partner", "create"],
      ["partner", "create", "--help"],
      ["user", "-h"],
      ["partner", "create", "--entitlement", "x"],
    ]) {
      const r = await runCli(argv, {}, TRACE_MODULES);
      expect(r.stderr, "the trace hook works").to.match(/LOADED \S*\/cli\/main\.(ts|js)$/m);
      expect(
        r.stderr.split("\n").filter((l) => DATABASE_OR_GATEWAYS.test(l) || RPC_STACK.test(l)),
        argv.join(" "),
      ).to.deep.equal([]);
      expect(r.stderr, "the trace hook works").to.satisfy((s: string) => !/ERR_/.test(s));
    }
    // The positive control: a command that calls core does load the RPC stack, and the trace sees it.
    const rpc = await runCli(["partner", "list"], proc.env, TRACE_MODULES);
    expect(rpc.code, rpc.stderr).to.equal(0);
    expect(rpc.stderr).to.match(RPC_STACK);
    expect(rpc.stderr).to.not.match(DATABASE_OR_GATEWAYS);
    const overview = await runCli(["help"], {});
    expect(overview.code).to.equal(0);
    for (const c of COMMANDS) expect(overview.stdout).to.include(`  ${c.name}`);
    const perCommand = await runCli(["help", "user", "get"], {});
    expect(perCommand.stdout).to.include("usage: vaultgate user get --email EMAIL").and.include("examples:\n  vaultgate user get --email");
    // Help offers --json only where the command prints JSON.
    const chain = await runCli(["dev", "chain", "--help"], {});
    expect(chain.code).to.equal(0);
    expect(chain.stdout).to.include("--format text|env").and.not.include("--json");
    const chainJson = await runCli(["dev", "chain", "--json"], {});
    expect([chainJson.code, chainJson.stderr.split("\n")[0]]).to.deep.equal([
      2,
      "vaultgate: dev chain prints KEY=value lines, not JSON (--format env prints only those)",
    ]);
    const flag = await runCli(["partner", "create", "-h"], {});
    expect(flag.code).to.equal(0);
    expect(flag.stdout).to.include("--entitlements a,b").and.include("--format text|json|env").and.include("examples:");
    // No command, or no subcommand: the help on stderr, nothing on stdout, exit 2.
    const none = await runCli([], {});
    expect(none.code).to.equal(2);
    expect(none.stderr).to.include("usage: vaultgate <command>");
    const noSub = await runCli(["partner"], {});
    expect([noSub.code, noSub.stdout]).to.deep.equal([2, ""]);
    expect(noSub.stderr).to.include("subcommands:\n  create");
  });

  it("has --help with usage and examples for every subcommand (in process)", async () => {
    for (const c of COMMANDS) {
      for (const s of c.subcommands) {
        const argv = [c.name, ...(s.name ? [s.name] : []), "--help"];
        const r = await inProcess(argv, false);
        expect(r.code, argv.join(" ")).to.equal(0);
        expect(r.out, argv.join(" "))
          .to.include(`usage: vaultgate ${[c.name, s.name].filter(Boolean).join(" ")}`)
          .and.include("examples:\n  vaultgate ");
      }
      const group = await inProcess(["help", c.name], false);
      expect(group.code).to.equal(0);
    }
  });

  it("partner create --format env prints lines a shell can eval", async () => {
    const res = await runCli(["partner", "create", "--name", "Env Co", "--entitlements", "kyc:read", "--format", "env"], proc.env);
    expect(res.code, res.stderr).to.equal(0);
    expect(res.stdout).to.match(/^CLIENT_ID=gpc_env-co_[0-9a-f]{8}\nCLIENT_SECRET=gps_[A-Za-z0-9_-]+\n$/);
    const clientId = /^CLIENT_ID=(.+)$/m.exec(res.stdout)![1]!;
    const list = await runCli(["partner", "list", "--all"], proc.env);
    expect((list.json!.partners as { client_id: string }[]).map((p) => p.client_id)).to.include(clientId);
    expect((await runCli(["partner", "create", "--name", "X", "--format", "yaml"], proc.env)).stderr).to.include("--format must be text, json or env");
    const both = await runCli(["partner", "create", "--name", "Two Formats", "--json", "--format", "env"], proc.env);
    expect([both.code, both.stdout]).to.deep.equal([2, ""]);
    expect(both.stderr).to.match(/^vaultgate: --json and --format env ask for different outputs: give one of them\n/);
    const after = await runCli(["partner", "list", "--all"], proc.env);
    expect((after.json!.partners as { name: string }[]).map((p) => p.name)).to.not.include("Two Formats");
  });

  it("partner list, user list and user get print JSON when piped, paging with --limit/--cursor or --all", async () => {
    const made: string[] = [];
    for (const name of ["List A", "List B", "List C"]) made.push((await runCli(["partner", "create", "--name", name], proc.env)).json!.client_id as string);
    const all = await runCli(["partner", "list", "--all"], proc.env);
    expect(all.code, all.stderr).to.equal(0);
    const partners = all.json!.partners as Record<string, unknown>[];
    expect(Object.keys(all.json!).sort()).to.deep.equal(["next_cursor", "partners"]);
    expect(all.json!.next_cursor).to.equal(null);
    const listed = partners.filter((p) => made.includes(p.client_id as string));
    expect(listed.map((p) => p.client_id)).to.deep.equal(made);
    expect(Object.keys(listed[0]!).sort()).to.deep.equal(["client_id", "entitlements", "name", "partner_id", "status", "webhook_gone_at", "webhook_url"]);
    expect(listed[0]!.webhook_gone_at, "deliveries not paused").to.equal(null);

    const first = await runCli(["partner", "list", "--limit", "1"], proc.env);
    expect(first.json!.partners).to.have.length(1);
    expect(first.json!.next_cursor).to.be.a("string");
    const second = await runCli(["partner", "list", "--limit", "1", "--cursor", first.json!.next_cursor as string], proc.env);
    expect((second.json!.partners as { client_id: string }[])[0]!.client_id).to.not.equal((first.json!.partners as { client_id: string }[])[0]!.client_id);
    expect((await runCli(["partner", "list", "--limit", "0"], proc.env)).code).to.equal(2);
    const forged = await runCli(["partner", "list", "--cursor", "forged"], proc.env);
    expect(forged.code).to.equal(1);
    expect(forged.stderr).to.include("invalid_cursor");

    const email = `cli-list-${Math.random().toString(16).slice(2)}@example.com`;
    const user = (await runCli(["user", "create", "--email", email], proc.env)).json!;
    const got = await runCli(["user", "get", "--email", email.toUpperCase()], proc.env);
    expect(got.code, got.stderr).to.equal(0);
    expect(got.json).to.deep.include({ user_id: user.user_id, email, status: "active", vault_id: user.vault_id });
    expect(got.json!.created_at).to.be.a("string");
    const users = await runCli(["user", "list", "--all"], proc.env);
    expect((users.json!.users as { user_id: string }[]).map((u) => u.user_id)).to.include(user.user_id);
    const missing = await runCli(["user", "get", "--email", "nobody@example.com"], proc.env);
    expect(missing.code).to.equal(1);
    expect(missing.stderr).to.equal("vaultgate: no such user (not_found)\n");
  });

  it("prints aligned text on a terminal and the same JSON with --json (in process)", async () => {
    const env = { CORE_URL: proc.env.CORE_URL!, DATA_DIR: proc.env.DATA_DIR! };
    const saved = { ...process.env };
    Object.assign(process.env, env);
    try {
      const email = `cli-text-${Math.random().toString(16).slice(2)}@example.com`;
      await inProcess(["user", "create", "--email", email], false);
      const text = await inProcess(["user", "get", "--email", email], true);
      expect(text.code, text.err).to.equal(0);
      expect(text.out).to.match(new RegExp(`^user_id:    [0-9a-f-]{36}\\nemail:      ${email.replace(/\./g, "\\.")}\\nstatus:     active\\n`));
      const json = await inProcess(["user", "get", "--email", email, "--json"], true);
      expect(JSON.parse(json.out)).to.include({ email, status: "active" });
      const table = await inProcess(["partner", "list", "--all"], true);
      expect(table.out).to.match(/^partners:\n {2}PARTNER_ID +CLIENT_ID +NAME +STATUS +ENTITLEMENTS +WEBHOOK_URL +WEBHOOK_GONE_AT\n/);
      const created = await inProcess(["partner", "create", "--name", "Text Co"], true);
      expect(created.out).to.match(/^partner_id: +\S+\nclient_id: +gpc_text-co_/m);
      expect(created.err).to.include("not shown again");
    } finally {
      for (const k of Object.keys(env)) if (saved[k] === undefined) delete process.env[k];
      Object.assign(process.env, saved);
    }
  });

  it("says which DATA_DIR it looked in, that ADMIN_TOKEN must match, and which core address it tried", async () => {
    const empty = await tempDataDir();
    try {
      const noToken = await runCli(["partner", "list"], { CORE_URL: proc.env.CORE_URL!, DATA_DIR: empty.path, ADMIN_TOKEN: "" });
      expect(noToken.code).to.equal(1);
      expect(noToken.stderr).to.include(`DATA_DIR=${empty.path}`).and.include("ADMIN_TOKEN");
      expect(noToken.stderr.trimEnd().split("\n")).to.have.length(1);
    } finally {
      await empty.remove();
    }
    const wrong = await runCli(["partner", "list"], { ...proc.env, ADMIN_TOKEN: "not-the-servers-token" });
    expect(wrong.code).to.equal(1);
    expect(wrong.stderr).to.include("operator credential required").and.include("from ADMIN_TOKEN").and.include("must match the server's ADMIN_TOKEN");
    expect(wrong.stderr).to.not.include("not-the-servers-token");
    const away = await runCli(["partner", "list"], { ...proc.env, CORE_URL: "http://127.0.0.1:9" });
    expect(away.code).to.equal(1);
    expect(away.stderr).to.include("cannot reach core at http://127.0.0.1:9 (from CORE_URL)");
    const gateway = await runCli(["partner", "list"], { ...proc.env, CORE_URL: proc.service.gatewayUrl! });
    expect(gateway.code).to.equal(1);
    expect(gateway.stderr).to.include(`${proc.service.gatewayUrl} (from CORE_URL) did not answer as core`).and.include("CORE_PORT");
    const { CORE_URL: _unused, ...withoutUrl } = proc.env;
    const byPort = await runCli(["partner", "list"], { ...withoutUrl, CORE_URL: "", CORE_PORT: "9" });
    expect(byPort.stderr).to.include("cannot reach core at http://127.0.0.1:9 (from CORE_HOST and CORE_PORT; CORE_URL is unset)");
    // A password in CORE_URL is refused before anything could print it; a path would only answer 404.
    const withPassword = await runCli(["partner", "list"], { ...proc.env, CORE_URL: "http://ops:hunter2-secret@127.0.0.1:9" });
    expect([withPassword.code, withPassword.stderr]).to.deep.equal([1, "vaultgate: CORE_URL must not carry a user name or password\n"]);
    const withPath = await runCli(["partner", "list"], { ...proc.env, CORE_URL: `${proc.env.CORE_URL}/core` });
    expect([withPath.code, withPath.stderr]).to.deep.equal([1, "vaultgate: CORE_URL must be scheme, host and port only, such as http://127.0.0.1:8081\n"]);
  });
});
