import { randomUUID } from "node:crypto";
import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import { Ajv2020 } from "ajv/dist/2020.js";
import { expect } from "chai";
import { startMcpStack, postRpc, type McpStack } from "../../support/mcp.js";
import { createOwner, grantFor } from "../../support/budgets.js";
import { FINE_NAMES, HOSTILE_NAMES } from "../../support/names.js";
import { expectJsonRpcError, expectToolError } from "../../support/refusals.js";
import { nameProblem } from "../../../lib/text.js";

/** agent.budget.create's display_name over HTTP: the published schema and the server refuse the same names. */
describe("agent.budget.create: display_name text rules over JSON-RPC", () => {
  let stack: McpStack;
  before(async () => {
    stack = await startMcpStack({ provisioningLimitPerMinute: 100_000 });
  });
  after(() => stack.close());

  const args = (display_name: string) => ({ purpose: "trip", display_name, chain_allowlist: ["base"], idempotency_key: `name-${randomUUID()}` });
  const rpc = (token: string, method: string, params: unknown) =>
    postRpc(`${stack.url}/mcp/treasury`, { jsonrpc: "2.0", id: 1, method, params }, { authorization: `Bearer ${token}` });
  const published = async (token: string) => {
    const tools = (await rpc(token, "tools/list", {})).json!.result.tools as Tool[];
    // A host's validator, not ours: the published schema alone must say what is refused.
    return new Ajv2020({ validateFormats: false }).compile(tools.find((t) => t.name === "agent.budget.create")!.inputSchema);
  };

  it("control characters, line separators, bidi controls and blank names: -32602 invalid_params naming /display_name, as a method and in tools/call; nothing provisioned", async () => {
    const owner = await createOwner(stack);
    const token = await grantFor(stack, owner, { stepUp: true });
    const validate = await published(token);
    for (const [name] of HOSTILE_NAMES) {
      const what = JSON.stringify(name);
      const a = args(name);
      expect(validate(a), what).to.equal(false);
      const direct = expectJsonRpcError(await rpc(token, "agent.budget.create", a), -32602, "invalid_params");
      expect(direct.data!.errors, what).to.deep.equal([
        { path: "/display_name", message: "must hold no control characters, line separators or bidirectional controls, and not be blank" },
      ]);
      const viaCall = await rpc(token, "tools/call", { name: "agent.budget.create", arguments: a });
      expectToolError(viaCall.json!.result, -32602, "invalid_params");
      const made = await stack.core.db("budgets").where({ parent_vault_id: owner.vaultId, idempotency_key: a.idempotency_key });
      expect(made, what).to.deep.equal([]);
    }
  });

  it("names with spaces around or inside, any script, emoji and up to 100 characters pass the schema and are created", async () => {
    const token = await grantFor(stack, await createOwner(stack), { stepUp: true });
    const validate = await published(token);
    for (const name of FINE_NAMES) {
      expect(validate(args(name)), JSON.stringify(name)).to.equal(true);
      const res = await rpc(token, "agent.budget.create", args(name));
      expect(res.json!.result?.status, res.text).to.equal("active");
    }
  });

  it("the published pattern agrees with core's rule (a control, separator or bidi character anywhere, or only spaces) for every code point", async () => {
    const validate = await published(await grantFor(stack, await createOwner(stack)));
    const mismatches: string[] = [];
    for (let c = 0; c <= 0x10ffff; c += c < 0x10000 ? 1 : 0x101) {
      if (c >= 0xd800 && c <= 0xdfff) continue;
      const ch = String.fromCodePoint(c);
      for (const name of [ch, `a${ch}`, ` ${ch} `]) {
        const coreTakes = nameProblem(name) === undefined && name.trim() !== "";
        if (validate(args(name)) !== coreTakes) mismatches.push(c.toString(16));
      }
    }
    expect(mismatches).to.deep.equal([]);
  });
});
