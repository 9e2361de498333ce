import { expect } from "chai";
import { randomUUID } from "node:crypto";
import { runCli, useServiceProcess } from "../support/process.js";

/** `vaultgate treasury bind|set-status|fund` against a running proc.service. */
describe("vaultgate treasury (CLI)", function () {
  this.timeout(120_000);
  const proc = useServiceProcess("core");

  it("binds, funds, suspends and reactivates a treasury with JSON output", async () => {
    const partner = (await runCli(["partner", "create", "--name", "Payer Co", "--entitlements", "treasury:write"], proc.env)).json!;
    const id = partner.client_id as string;
    const payer = randomUUID();
    const bound = await runCli(
      ["treasury", "bind", "--partner", id, "--payer-entity-id", payer, "--balance-cents", "5000", "--cap-per-item", "1000", "--step-up-amount", "800"],
      proc.env,
    );
    expect(bound.code, bound.stderr).to.equal(0);
    expect(bound.json).to.deep.equal({
      client_id: id,
      status: "active",
      payer_entity_id: payer,
      currency: "USD",
      available_cents: 5000,
      cap_per_item_cents: 1000,
      cap_per_day_cents: null,
      cap_lifetime_cents: null,
      step_up_amount_cents: 800,
      created: true,
    });
    const funded = await runCli(["treasury", "fund", id, "--amount-cents", "2500"], proc.env);
    expect(funded.json!.available_cents).to.equal(7500);
    for (const status of ["suspended", "disabled", "mandate_expired", "active"]) {
      const set = await runCli(["treasury", "set-status", id, status], proc.env);
      expect(set.code, set.stderr).to.equal(0);
      expect(set.json!.status).to.equal(status);
    }
  });

  it("fails with a clear message and a non-zero exit", async () => {
    const usage = await runCli(["treasury", "set-status", "gpc_x_00000000", "frozen"], proc.env);
    expect(usage.code).to.equal(2);
    expect(usage.stderr).to.contain("status must be one of");
    const missing = await runCli(["treasury", "fund", "gpc_nobody_00000000", "--amount-cents", "1"], proc.env);
    expect(missing.code).to.equal(1);
    expect(missing.stderr).to.contain("(not_found)");
    const partner = (await runCli(["partner", "create", "--name", "Unbound"], proc.env)).json!;
    const unbound = await runCli(["treasury", "fund", partner.client_id as string, "--amount-cents", "1"], proc.env);
    expect(unbound.code).to.equal(1);
    expect(unbound.stderr).to.contain("(treasury_not_configured)");
    const badPayer = await runCli(["treasury", "bind", "--partner", partner.client_id as string, "--payer-entity-id", "x", "--balance-cents", "1"], proc.env);
    expect(badPayer.stderr).to.contain("payer_entity_id must be a UUID");
  });

  it("a status named like a property every object has is a usage error, and the treasury keeps its status", async () => {
    const id = (await runCli(["partner", "create", "--name", "Proto Co"], proc.env)).json!.client_id as string;
    const bound = await runCli(["treasury", "bind", "--partner", id, "--payer-entity-id", randomUUID(), "--balance-cents", "5"], proc.env);
    expect(bound.code, bound.stderr).to.equal(0);
    for (const name of ["constructor", "toString", "__proto__", "hasOwnProperty"]) {
      const res = await runCli(["treasury", "set-status", id, name], proc.env);
      expect(res.code, `${name}: ${res.stderr}`).to.equal(2);
      expect(res.stdout).to.equal("");
      expect(res.stderr).to.equal("vaultgate: status must be one of active|suspended|disabled|mandate_expired\nsee 'vaultgate treasury set-status --help'\n");
    }
    const still = await runCli(["treasury", "fund", id, "--amount-cents", "1"], proc.env);
    expect(still.json).to.include({ status: "active", available_cents: 6 });
  });
});
