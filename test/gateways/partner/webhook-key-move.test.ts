import { expect } from "chai";
import { randomBytes } from "node:crypto";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { startStack, type TestStack } from "../../support/stack.js";
import { createPartner } from "../../support/partners.js";
import { createUserFor } from "../../support/resources.js";
import { startWebhookReceiver } from "../../support/webhook-receiver.js";
import { createSecretBox, generateWebhookSecret } from "../../../core/partners/webhooks/signing.js";
import { ownDatabase, usingPostgres } from "../../support/db.js";

/** Every row of the tables that held or hold webhook-secret material, as a dump would. */
async function dump(stack: TestStack): Promise<string> {
  const secrets = (await stack.core.db.raw(`SELECT name, encode(value, 'hex') AS value FROM instance_secrets`)).rows as unknown[];
  const partners = await stack.core.db("partners").select("*");
  return JSON.stringify({ secrets, partners });
}

/**
 * A database still holding the webhook secret key has it moved out at start: secrets are
 * re-encrypted under the outside key and the copy deleted, and deliveries still verify.
 */
describe("webhook secrets: the key moves out of the database", function () {
  this.timeout(60_000);
  const stacks: TestStack[] = [];
  const dirs: string[] = [];
  const databases: Awaited<ReturnType<typeof ownDatabase>>[] = [];
  // Each case on a database of its own: a database records which key protects it.
  async function database() {
    const d = await ownDatabase();
    databases.push(d);
    return d.db;
  }
  after(async () => {
    for (const s of stacks) await s.close();
    for (const d of databases) await d.drop();
    for (const d of dirs) await rm(d, { recursive: true, force: true });
  });

  it("a database holding the old key: after two replicas start the rows hold no key, and deliveries verify with the partner's secret", async () => {
    const db = await database();
    const first = await startStack({ webhookPollMs: 0, database: db });
    stacks.push(first);
    // What an earlier version left: its key in instance_secrets and a secret sealed under it.
    const oldKey = randomBytes(32);
    const secret = generateWebhookSecret();
    const receiver = await startWebhookReceiver();
    const partner = await createPartner(first, { webhookUrl: receiver.url });
    const { userId } = await createUserFor(first, partner);
    await first.core.db.raw(
      `INSERT INTO instance_secrets (name, value) VALUES ('webhook-secrets', ?) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`,
      [oldKey],
    );
    await first.core
      .db("partners")
      .where({ id: partner.partnerId })
      .update({ webhook_url: receiver.url, webhook_secret_enc: createSecretBox(oldKey).seal(secret) });
    expect(await dump(first)).to.include(oldKey.toString("hex"));

    // Two replicas start at once on that database, each with its own DATA_DIR key setting.
    const dataDir = await mkdtemp(join(tmpdir(), "vg-webhook-key-"));
    dirs.push(dataDir);
    const key = randomBytes(32).toString("base64");
    // The first stack (above) ran with keys of its own: forget their check values, as an
    // earlier version's database never had any. The replicas share every outside key.
    await db("instance_secrets").where("name", "like", "key-check:%").delete();
    const signinCodeKey = randomBytes(32).toString("base64");
    const starts = [
      startStack({ webhookPollMs: 0, dataDir, webhookSecretKey: key, signinCodeKey, database: db }),
      startStack({ webhookPollMs: 0, webhookSecretKey: key, signinCodeKey, database: db }),
    ];
    const [moved, twin] = usingPostgres() ? await Promise.all(starts) : [await starts[0]!, await starts[1]!];
    stacks.push(moved!, twin!);

    const rows = await dump(moved!);
    expect(rows).to.not.include(oldKey.toString("hex"));
    expect(rows).to.not.include(Buffer.from(key, "base64").toString("hex"));
    expect(rows).to.not.include(secret);
    expect((await moved!.core.db("instance_secrets").where({ name: "webhook-secrets" })).length).to.equal(0);
    // The rows alone (the old key included) no longer open the stored secret.
    const stored = (await moved!.core.db("partners").where({ id: partner.partnerId }).first()).webhook_secret_enc as string;
    expect(() => createSecretBox(oldKey).open(stored)).to.throw();
    expect(createSecretBox(Buffer.from(key, "base64")).open(stored)).to.equal(secret);

    // A delivery from the moved deployment verifies with the partner's own secret.
    await moved!.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 5n });
    await moved!.core.webhooks.runOnce();
    await receiver.waitFor(1);
    const wh = new Webhook(secret);
    expect(
      receiver.received.map((r) => (wh.verify(r.body, r.headers as Record<string, string>) as { data: { amount_cents: number } }).data.amount_cents),
    ).to.deep.equal([5]);
    await receiver.close();
  });

  it("without a setting, the key is generated into DATA_DIR (0600) and kept across starts", async () => {
    const dataDir = await mkdtemp(join(tmpdir(), "vg-webhook-key-"));
    dirs.push(dataDir);
    const db = await database();
    const a = await startStack({ webhookPollMs: 0, dataDir, database: db });
    stacks.push(a);
    const file = join(dataDir, "webhook-secret-key");
    expect((await stat(file)).mode & 0o777).to.equal(0o600);
    const written = await readFile(file, "utf8");
    expect(Buffer.from(written.trim(), "base64")).to.have.length(32);
    const b = await startStack({ webhookPollMs: 0, dataDir, database: db });
    stacks.push(b);
    expect(await readFile(file, "utf8")).to.equal(written);
    expect(await dump(b)).to.not.include(Buffer.from(written.trim(), "base64").toString("hex"));
  });

  it("hostile to operators' mistakes: a replica started with another key refuses to start, naming the setting", async () => {
    const db = await database();
    const key = randomBytes(32).toString("base64");
    stacks.push(await startStack({ webhookPollMs: 0, webhookSecretKey: key, database: db }));
    const other = randomBytes(32).toString("base64");
    const err = await startStack({ webhookPollMs: 0, webhookSecretKey: other, database: db }).then(
      (s) => {
        stacks.push(s);
        return undefined;
      },
      (e: unknown) => e as Error,
    );
    expect(err?.message).to.match(/^WEBHOOK_SECRET_KEY is not the key that protects what this database already holds/);
    expect(err?.message).to.not.include(other);
    // The same key still starts.
    stacks.push(await startStack({ webhookPollMs: 0, webhookSecretKey: key, database: db }));
  });
});
