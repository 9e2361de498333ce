import { request } from "node:http";
import { expect } from "chai";
import { createOwner, grantFor } from "../support/budgets.js";
import { startStack, type TestStack } from "../support/stack.js";
import { requirePostgres } from "../support/db.js";

/**
 * RFC 9110 7.2: a client may name the scheme's default port in Host (`vaultgate.test:443` for an
 * https address, as a client given `https://vaultgate.test:443/mcp/read` sends it). It is the
 * same authority, so the Host guard lets it through; any other port or name is still refused.
 */
describe("Host guard: the configured scheme's default port named explicitly", () => {
  let stack: TestStack;
  let token: string;
  before(async () => {
    stack = await startStack({ gateway: true, issuer: "https://vaultgate.test", allowedOrigins: ["https://host.example"] });
    token = await grantFor(stack, await createOwner(stack));
  });
  after(() => stack.close());

  function post(path: string, host: string, body: object, headers: Record<string, string> = {}): Promise<number> {
    return new Promise((resolve, reject) => {
      const req = request(`${stack.url}${path}`, { method: "POST", headers: { host, "content-type": "application/json", ...headers } }, (res) => {
        res.resume();
        res.on("end", () => resolve(res.statusCode!));
      });
      req.on("error", reject);
      req.end(JSON.stringify(body));
    });
  }
  const rpc = (host: string) => post("/mcp/read", host, { jsonrpc: "2.0", id: 1, method: "tools/list" }, { authorization: `Bearer ${token}` });
  const register = (host: string) => post("/oauth2/register", host, { redirect_uris: ["https://a.example/cb"] });

  it("MCP endpoints and registration take a Host with :443 for an https address, as without it", async () => {
    for (const host of ["vaultgate.test", "vaultgate.test:443", "VaultGate.Test:443", "host.example:443"]) {
      expect(await rpc(host), host).to.equal(200);
      expect(await register(host), host).to.equal(201);
    }
  });

  it("hostile: another port of the name, or another name on the default port, is still refused", async () => {
    for (const host of ["vaultgate.test:80", "vaultgate.test:8443", "evil.example:443", "vaultgate.test.evil.example:443"]) {
      expect(await rpc(host), host).to.equal(403);
      expect(await register(host), host).to.equal(403);
    }
  });

  it("PostgreSQL only: 40 concurrent calls, our Host with and without :443 and foreign ones mixed, each get their own answer", async function () {
    requirePostgres(this, "many grant reads at once need several connections");
    const hosts = Array.from({ length: 40 }, (_, i) => ["vaultgate.test:443", "evil.example:443", "vaultgate.test", "vaultgate.test:80"][i % 4]!);
    const statuses = await Promise.all(hosts.map((host) => rpc(host)));
    expect(statuses).to.deep.equal(hosts.map((h) => (h === "vaultgate.test:443" || h === "vaultgate.test" ? 200 : 403)));
  });
});
