import { createHash, createHmac, hkdfSync } from "node:crypto";
import { request as httpRequest } from "node:http";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, latestCode, signIn, type Jar } from "../../support/agent-oauth.js";
import { lockoutNotices, startChallenge, wrongFor } from "../../support/signin-codes.js";
import { ownDatabase, requirePostgres } from "../../support/db.js";

interface Answer {
  status: number;
  retryAfter: string | undefined;
  text: string;
}

/** Posts a code from a chosen loopback source address (a distinct client address for the gateway), with the jar's cookies. */
function postCodeFrom(
  stack: TestStack,
  jar: Jar,
  action: string,
  fields: Record<string, string | string[]>,
  code: string,
  localAddress: string,
): Promise<Answer> {
  const target = new URL(stack.url + action);
  const body = new URLSearchParams({ ...(fields as Record<string, string>), code }).toString();
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: "POST",
        localAddress,
        agent: false,
        headers: {
          "content-type": "application/x-www-form-urlencoded",
          "content-length": Buffer.byteLength(body),
          cookie: [...jar.cookies].map(([k, v]) => `${k}=${v}`).join("; "),
        },
      },
      (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text += c));
        res.on("end", () => resolve({ status: res.statusCode!, retryAfter: res.headers["retry-after"] as string | undefined, text }));
      },
    );
    req.on("error", reject);
    req.end(body);
  });
}

/**
 * Ten wrong codes per account per 15 minutes, whatever the challenge or address; then 429 with
 * Retry-After even for the right code, and one e-mail to the holder. Known browsers and step-ups have their own.
 */
describe("web pages: wrong sign-in codes lock the account's code sign-in", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack.close());

  /** An outsider's flood from a browser of their own: ten wrong codes, then every send the hour allows. */
  async function lockOut(email: string) {
    const attacker = createJar(stack.url);
    for (let c = 0; c < 2; c++) {
      const { fields, code } = await startChallenge(stack, attacker, email);
      for (let i = 0; i < 5; i++) expect((await postCodeFrom(stack, attacker, "/signin/code", fields, wrongFor(code, i), "127.0.0.3")).status).to.equal(400);
    }
    for (;;) {
      const form = formFields(await (await attacker.get("/signin")).text(), "/signin");
      const sent = await attacker.post("/signin", { ...form, email });
      if (sent.status === 429) return;
      expect(sent.status).to.equal(303);
      stack.clock.advance(31_000);
    }
  }

  it("10 wrong codes over three challenges from three addresses lock it; the right code then gets 429; another account is unaffected", async () => {
    const victim = await createUser(stack);
    const bystander = await createUser(stack);
    const attacker = createJar(stack.url);
    const addresses = ["127.0.0.2", "127.0.0.3", "127.0.0.4"];
    let guesses = 0;
    for (const [n, count] of [4, 3, 3].entries()) {
      const { fields, code } = await startChallenge(stack, attacker, victim.email);
      for (let i = 0; i < count; i++) {
        const res = await postCodeFrom(stack, attacker, "/signin/code", fields, wrongFor(code, i), addresses[(guesses++ + n) % addresses.length]!);
        expect(res.status, `wrong code ${guesses}`).to.equal(400);
      }
    }
    expect(await lockoutNotices(stack, victim.email)).to.have.length(1);
    expect((await lockoutNotices(stack, victim.email))[0]!.body).to.match(/code sign-in is paused until \d\d:\d\d UTC/);

    // The holder asks for a fresh code and types it correctly: still refused while locked.
    const holder = createJar(stack.url);
    const { fields, code } = await startChallenge(stack, holder, victim.email);
    const refused = await postCodeFrom(stack, holder, "/signin/code", fields, code, "127.0.0.5");
    expect(refused.status).to.equal(429);
    const retryAfter = Number(refused.retryAfter);
    expect(retryAfter).to.be.within(1, 900);
    expect(refused.text).to.match(/paused for \d+ (minutes|seconds)/);
    expect(holder.cookies.has("vg_session")).to.equal(false);
    // Further wrong codes do not send another notice.
    expect((await postCodeFrom(stack, holder, "/signin/code", fields, wrongFor(code, 0), "127.0.0.2")).status).to.equal(429);
    expect(await lockoutNotices(stack, victim.email)).to.have.length(1);

    // Another account signs in meanwhile, from the attacker's addresses too.
    const other = createJar(stack.url);
    const b = await startChallenge(stack, other, bystander.email);
    expect((await postCodeFrom(stack, other, "/signin/code", b.fields, b.code, "127.0.0.2")).status).to.equal(303);

    // Once the window has passed, the account holder signs in.
    stack.clock.advance(retryAfter * 1000);
    await signIn(stack, createJar(stack.url), victim.email);
  });

  it("step-up spends its session's budget: outsiders locking the account do not block the signed-in person", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    await signIn(stack, jar, user.email);
    stack.clock.advance(31_000);
    await lockOut(user.email);
    const page = await jar.get("/stepup");
    const sent = await jar.post("/stepup", formFields(await page.text(), "/stepup"));
    expect(sent.status).to.equal(303);
    const fields = formFields(await (await jar.get(sent.headers.get("location")!)).text(), "/stepup/code");
    const res = await jar.post("/stepup/code", { ...fields, code: await latestCode(stack, user.email) });
    expect(res.status, await res.clone().text()).to.equal(303);
  });

  it("a browser the holder signed in with before keeps its own budget while outsiders hold the account locked", async () => {
    const victim = await createUser(stack);
    const holder = createJar(stack.url);
    await signIn(stack, holder, victim.email);
    expect(holder.cookies.get("vg_browser")).to.match(/^vgb_/);
    holder.cookies.delete("vg_session");
    stack.clock.advance(31_000);
    await lockOut(victim.email);
    // A browser the account was never signed in with is refused: the account's budget is spent.
    const stranger = createJar(stack.url);
    const form = formFields(await (await stranger.get("/signin")).text(), "/signin");
    expect((await stranger.post("/signin", { ...form, email: victim.email })).status).to.equal(429);
    // The holder's browser asks for a code at once and signs in, and is told it is known again.
    await signIn(stack, holder, victim.email);
    expect(holder.cookies.get("vg_session")).to.match(/^vgs_/);
    // A mark copied to another account's sign-in is worth nothing there.
    const other = await createUser(stack);
    await lockOut(other.email);
    const copied = createJar(stack.url);
    copied.cookies.set("vg_browser", holder.cookies.get("vg_browser")!);
    const again = formFields(await (await copied.get("/signin")).text(), "/signin");
    expect((await copied.post("/signin", { ...again, email: other.email })).status).to.equal(429);
  });

  it("an unknown address answers the same: 400 for ten wrong codes, then 429", async () => {
    const email = `nobody-${Date.now()}@example.com`;
    const jar = createJar(stack.url);
    for (let c = 0; c < 2; c++) {
      const { fields } = await startChallenge(stack, jar, email);
      for (let i = 0; i < 5; i++) expect((await postCodeFrom(stack, jar, "/signin/code", fields, String(100000 + i), "127.0.0.2")).status).to.equal(400);
    }
    const { fields } = await startChallenge(stack, jar, email);
    const res = await postCodeFrom(stack, jar, "/signin/code", fields, "123456", "127.0.0.2");
    expect(res.status).to.equal(429);
    expect(Number(res.retryAfter)).to.be.within(1, 900);
    expect((await stack.admin.grants.listOutbox({ email })).messages).to.have.length(0);
  });

  it("concurrent wrong codes over many challenges: no more than 10 are ever checked (PostgreSQL)", async function () {
    requirePostgres(this, "concurrent guesses need several connections");
    const user = await createUser(stack);
    const jars = await Promise.all([0, 1, 2, 3, 4, 5].map(async () => createJar(stack.url)));
    const challenges: { jar: Jar; fields: Record<string, string | string[]>; code: string }[] = [];
    for (const jar of jars) challenges.push({ jar, ...(await startChallenge(stack, jar, user.email)) });
    // 5 guesses on each of 6 challenges (30, none exhausting a challenge), all at once.
    const answers = await Promise.all(
      challenges.flatMap((c, n) =>
        [0, 1, 2, 3, 4].map((i) => postCodeFrom(stack, c.jar, "/signin/code", c.fields, wrongFor(c.code, i), `127.0.0.${2 + ((n + i) % 5)}`)),
      ),
    );
    const checked = answers.filter((a) => a.status === 400).length;
    expect(answers.filter((a) => a.status !== 400 && a.status !== 429)).to.deep.equal([]);
    expect(checked).to.equal(10);
    const ids = challenges.map((c) => c.fields.challenge as string);
    const { rows } = await stack.core.db.raw(`SELECT coalesce(sum(attempts), 0)::int AS n FROM signin_challenges WHERE id = ANY(?::uuid[])`, [ids]);
    expect(rows[0].n).to.equal(10);
    expect(await lockoutNotices(stack, user.email)).to.have.length(1);
  });
});

/**
 * Codes are stored as an HMAC under a key outside the database (a 0600 file in DATA_DIR
 * unless SIGNIN_CODE_KEY is set), and the dev outbox holds no code in clear: the rows alone
 * reveal nothing, while `vaultgate dev outbox` (listOutbox) still shows the code.
 */
describe("sign-in codes at rest", () => {
  let stack: TestStack;
  let dataDir: string;
  let database: Awaited<ReturnType<typeof ownDatabase>>;
  before(async function () {
    this.timeout(60_000);
    dataDir = await mkdtemp(join(tmpdir(), "vg-otp-key-"));
    // A database of its own: a database records which sign-in code key protects it.
    database = await ownDatabase();
    stack = await startStack({ gateway: true, dataDir, database: database.db });
  });
  after(async () => {
    await stack.close();
    await database.drop();
    await rm(dataDir, { recursive: true, force: true });
  });

  it("the stored code hash is keyed by the file outside the database, and the outbox row holds no code", async () => {
    const user = await createUser(stack);
    const jar = createJar(stack.url);
    const { fields, code } = await startChallenge(stack, jar, user.email);
    const id = fields.challenge as string;
    const { rows } = await stack.core.db.raw(`SELECT code_hash FROM signin_challenges WHERE id = ?`, [id]);
    const stored = String(rows[0].code_hash);
    const message = `${id}:${code}`;
    expect(stored).to.not.equal(createHash("sha256").update(message).digest("hex"));
    expect(stored).to.not.equal(createHmac("sha256", Buffer.alloc(32)).update(message).digest("hex"));
    // Reproducible only with the key file.
    const keyFile = join(dataDir, "signin-code-key");
    expect((await stat(keyFile)).mode & 0o777).to.equal(0o600);
    const key = Buffer.from((await readFile(keyFile, "utf8")).trim(), "base64");
    const hashKey = Buffer.from(hkdfSync("sha256", key, Buffer.alloc(0), "vaultgate sign-in code hash", 32));
    expect(stored).to.equal(createHmac("sha256", hashKey).update(message).digest("hex"));

    const outbox = await stack.core.db("dev_outbox").where({ email: user.email });
    expect(outbox).to.have.length(1);
    expect(JSON.stringify(outbox)).to.not.include(code);
    expect(await latestCode(stack, user.email)).to.equal(code);
  });
});
