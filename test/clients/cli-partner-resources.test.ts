import { expect } from "chai";
import { main } from "../../cli/main.js";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { startStack, type TestStack } from "../support/stack.js";
import { createPartner, mintPartnerToken } from "../support/partners.js";
import { api } from "../support/resources.js";

/** Runs the real CLI entry point against a core on 127.0.0.1:0 and parses its JSON output. */
async function cli(core: CoreServer, adminToken: string, ...argv: string[]): Promise<{ code: number; json: Record<string, unknown> }> {
  const saved = { CORE_URL: process.env.CORE_URL, ADMIN_TOKEN: process.env.ADMIN_TOKEN };
  process.env.CORE_URL = core.url;
  process.env.ADMIN_TOKEN = adminToken;
  let out = "";
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string) => {
    out += chunk;
    return true;
  }) as typeof process.stdout.write;
  try {
    // --json: the test's own stdout may be a terminal (text output).
    const code = await main([...argv, "--json"]);
    return { code, json: out ? (JSON.parse(out) as Record<string, unknown>) : {} };
  } finally {
    process.stdout.write = write;
    for (const [k, v] of Object.entries(saved)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
  }
}

describe("operator CLI: users, consent, ledger, webhooks", () => {
  let stack: TestStack;
  let server: CoreServer;
  before(async () => {
    stack = await startStack({ gateway: true, webhookPollMs: 0 });
    server = await startCoreServer(stack.core, 0, "127.0.0.1");
  });
  after(async () => {
    await server.close();
    await stack.close();
  });

  it("shapes a user that a partner then reads over HTTP", async () => {
    const partner = await createPartner(stack);
    const email = `cli-${Math.random().toString(16).slice(2)}@example.com`;
    const created = await cli(server, stack.adminToken, "user", "create", "--email", email);
    const userId = created.json.user_id as string;
    expect(
      (
        await cli(
          server,
          stack.adminToken,
          "consent",
          "grant",
          "--partner",
          partner.clientId,
          "--user",
          userId,
          "--scopes",
          "kyc:read,wallet:read,transfers:read,us_account:read",
        )
      ).json.scopes,
    ).to.deep.equal(["kyc:read", "wallet:read", "us_account:read", "transfers:read"]);
    expect((await cli(server, stack.adminToken, "user", "set-kyc", userId, "--status", "approved", "--provider", "acme")).json).to.include({
      status: "approved",
      provider: "acme",
    });
    expect(
      (await cli(server, stack.adminToken, "user", "add-wallet", userId, "--chain", "sol", "--address", "9xQeWvG816bUx9EPjHmaT23yvVM2ZWbrrpZb9PusVFin")).json
        .wallets,
    ).to.have.length(1);
    expect((await cli(server, stack.adminToken, "user", "provision-us-account", userId)).json.status).to.equal("provisioned");
    expect((await cli(server, stack.adminToken, "ledger", "record", userId, "--direction", "credit", "--amount-cents", "2500")).json).to.include({
      amount_cents: 2500,
      status: "settled",
    });

    const token = await mintPartnerToken(stack, partner);
    expect((await api(stack, "GET", `/users/${userId}/kyc`, { token })).body).to.include({ status: "approved", provider: "acme" });
    expect(((await api(stack, "GET", `/users/${userId}/wallets`, { token })).body as { wallets: unknown[] }).wallets).to.have.length(1);
    expect(((await api(stack, "GET", `/users/${userId}/transfers`, { token })).body as { data: unknown[] }).data).to.have.length(1);

    expect((await cli(server, stack.adminToken, "user", "set-status", userId, "inactive")).json.status).to.equal("inactive");
    expect((await api(stack, "GET", `/users/${userId}/kyc`, { token })).status).to.equal(403);
    await cli(server, stack.adminToken, "user", "set-status", userId, "active");
    expect(
      (await cli(server, stack.adminToken, "consent", "revoke", "--partner", partner.clientId, "--user", userId, "--scopes", "kyc:read")).json.scopes,
    ).to.not.include("kyc:read");
    expect((await api(stack, "GET", `/users/${userId}/kyc`, { token })).status).to.equal(403);
  });

  it("partner create --webhook-url returns the webhook secret once; partner webhook replaces it", async () => {
    const created = await cli(
      server,
      stack.adminToken,
      "partner",
      "create",
      "--name",
      "Hooked",
      "--slug",
      `h-${Math.random().toString(16).slice(2, 8)}`,
      "--webhook-url",
      "http://127.0.0.1:9/v1",
    );
    expect(created.json.webhook_url).to.equal("http://127.0.0.1:9/v1");
    expect(created.json.webhook_secret).to.match(/^whsec_/);
    const replaced = await cli(server, stack.adminToken, "partner", "webhook", created.json.client_id as string, "--url", "http://127.0.0.1:9/v2");
    expect(replaced.json.webhook_secret)
      .to.match(/^whsec_/)
      .and.not.equal(created.json.webhook_secret);
    // The replaced secret still signs for 24 hours: the answer says until when.
    expect(Date.parse(replaced.json.previous_secret_expires_at as string) - Date.now()).to.be.within(23 * 3600_000, 24 * 3600_000);
    const cleared = await cli(server, stack.adminToken, "partner", "webhook", created.json.client_id as string, "--url", "");
    expect(cleared.json).to.deep.include({ webhook_url: null, webhook_secret: null, previous_secret_expires_at: null });
    const refused = await cli(server, stack.adminToken, "partner", "webhook", created.json.client_id as string, "--url", "http://hooks.example/plain");
    expect(refused.code).to.equal(1);
  });
});
