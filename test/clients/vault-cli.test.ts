import { expect } from "chai";
import { runCli, useServiceProcess } from "../support/process.js";

/** `vaultgate vault fund` against a running `vaultgate serve`, and the MCP endpoints it serves. */
describe("vaultgate vault fund (real processes)", function () {
  this.timeout(120_000);
  const proc = useServiceProcess("all");

  it("credits a user's vault and prints the balance as JSON", async () => {
    const user = (await runCli(["user", "create", "--email", "fund@example.test"], proc.env)).json!;
    const funded = await runCli(["vault", "fund", user.vault_id as string, "--amount-cents", "12345"], proc.env);
    expect(funded.code).to.equal(0);
    expect(funded.json).to.deep.equal({ vault_id: user.vault_id, balance_cents: 12345, currency: "USD" });
    const again = await runCli(["vault", "fund", user.vault_id as string, "--amount-cents", "5"], proc.env);
    expect(again.json!.balance_cents).to.equal(12350);
  });

  it("refuses bad input with a usage error or the core's reason", async () => {
    expect((await runCli(["vault", "fund", "--amount-cents", "5"], proc.env)).code).to.equal(2);
    expect((await runCli(["vault", "fund", "00000000-0000-4000-8000-000000000000", "--amount-cents", "x"], proc.env)).code).to.equal(2);
    const missing = await runCli(["vault", "fund", "00000000-0000-4000-8000-000000000000", "--amount-cents", "5"], proc.env);
    expect(missing.code).to.equal(1);
    expect(missing.stderr).to.include("not_found");
  });

  it("serves the agent tool endpoints with the configured {mcp_url} in the 401 challenge", async () => {
    const res = await fetch(`${proc.service.gatewayUrl}/mcp/read`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    });
    expect(res.status).to.equal(401);
    expect(res.headers.get("www-authenticate")).to.match(
      /^Bearer resource_metadata="http:\/\/127\.0\.0\.1:\d+\/\.well-known\/oauth-protected-resource\/mcp\/read", scope="accounts:read audit:stream"$/,
    );
  });
});
