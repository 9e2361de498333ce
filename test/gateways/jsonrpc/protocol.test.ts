import type { Tool } from "@modelcontextprotocol/sdk/types.js";
import { expect } from "chai";
import { startMcpStack, postRpc, TEST_MCP_URL, type JsonRpcReply, type McpStack } from "../../support/mcp.js";
import { createOwner, grantFor, revokeGrant } from "../../support/budgets.js";
import { Ajv2020 } from "ajv/dist/2020.js";
import { createSchemaAjv } from "../../../gateways/jsonrpc/schemas.js";
import { expectJsonRpcError } from "../../support/refusals.js";

const TREASURY_CHALLENGE = `Bearer resource_metadata="${TEST_MCP_URL}/.well-known/oauth-protected-resource/mcp/treasury", scope="agent:budget:create"`;
const READ_CHALLENGE = `Bearer resource_metadata="${TEST_MCP_URL}/.well-known/oauth-protected-resource/mcp/read", scope="accounts:read audit:stream"`;

describe("JSON-RPC 2.0 / MCP protocol on {mcp_url}", () => {
  let stack: McpStack;
  let token: string;
  let auth: Record<string, string>;

  before(async () => {
    stack = await startMcpStack();
    const owner = await createOwner(stack);
    token = await grantFor(stack, owner);
    auth = { authorization: `Bearer ${token}` };
  });
  after(() => stack.close());

  const at = (path: string) => `${stack.url}${path}`;

  it("unparsable JSON is -32700 with id null (exact envelope)", async () => {
    const res = await postRpc(at("/mcp/write"), '{"jsonrpc":"2.0",', auth);
    expect(res.status).to.equal(200);
    const requestId = res.headers.get("x-request-id");
    expect(res.text).to.equal(
      JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error", data: { reason_id: "parse_error", request_id: requestId } } }),
    );
  });

  it("a malformed envelope is -32600, echoing the id when the id itself is valid", async () => {
    const cases: [unknown, unknown][] = [
      [1, null],
      ["x", null],
      [{}, null],
      [{ jsonrpc: "1.0", id: 1, method: "ping" }, 1],
      [{ id: 2, method: "ping" }, 2],
      [{ jsonrpc: "2.0", id: "a", method: 5 }, "a"],
      [{ jsonrpc: "2.0", id: 3, method: "" }, 3],
      [{ jsonrpc: "2.0", id: 4, method: "ping", params: "x" }, 4],
      [{ jsonrpc: "2.0", id: { n: 1 }, method: "ping" }, null],
      // MCP: an id is a string or an integer, never null or a fraction.
      [{ jsonrpc: "2.0", id: null, method: "ping" }, null],
      [{ jsonrpc: "2.0", id: 1.5, method: "ping" }, null],
      [{ jsonrpc: "2.0", id: 5, method: "ping", extra: true }, 5],
      [[], null],
    ];
    for (const [body, id] of cases) {
      const res = await postRpc(at("/mcp/write"), JSON.stringify(body), auth);
      expect(res.status, JSON.stringify(body)).to.equal(200);
      expect(res.json!.jsonrpc).to.equal("2.0");
      expect(res.json!.id, JSON.stringify(body)).to.deep.equal(id);
      expect(res.json!.error.code, JSON.stringify(body)).to.equal(-32600);
      expect(res.json!.error.message).to.equal("Invalid Request");
      expect(res.json!.error.data.reason_id).to.equal("invalid_request");
    }
  });

  it("a numeral no double holds is a number, never a structure: as params -32600, as arguments -32602", async () => {
    const envelope = async (body: string) => (await postRpc(at("/mcp/read"), body, auth)).json!;
    for (const [body, detail] of [
      ['{"jsonrpc":"2.0","id":6,"method":"accounts.balance","params":1e400}', "params must be an object or an array"],
      ["1e400", "the request must be a JSON object"],
    ] as const) {
      const reply = await envelope(body);
      expect([reply.error.code, reply.error.data.reason_id, reply.error.data.detail], body).to.deep.equal([-32600, "invalid_request", detail]);
    }
    // A batch answers per element: the one element is no request object.
    expect((await envelope("[1e400]"))[0].error.data.detail).to.equal("the request must be a JSON object");
    const args = await envelope('{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"accounts.balance","arguments":1e400}}');
    expect([args.id, args.error.code, args.error.data.detail]).to.deep.equal([7, -32602, "params.arguments must be an object"]);
  });

  it("answers batches element by element; notifications get no response and no body", async () => {
    const batch = await postRpc(
      at("/mcp/write"),
      [{ jsonrpc: "2.0", id: 1, method: "ping" }, { jsonrpc: "2.0", method: "notifications/initialized" }, 7, { jsonrpc: "2.0", id: "u", method: "nope" }],
      auth,
    );
    expect(batch.status).to.equal(200);
    const replies = batch.json as unknown as { id: unknown; result?: unknown; error?: { code: number } }[];
    expect(replies.map((r) => [r.id, r.result ?? r.error!.code])).to.deep.equal([
      [1, {}],
      [null, -32600],
      ["u", -32601],
    ]);
    const note = await postRpc(at("/mcp/write"), { jsonrpc: "2.0", method: "notifications/initialized" }, auth);
    expect(note.status).to.equal(202);
    expect(note.text).to.equal("");
    const onlyNotes = await postRpc(
      at("/mcp/read"),
      [
        { jsonrpc: "2.0", method: "notifications/initialized" },
        { jsonrpc: "2.0", method: "ping" },
      ],
      auth,
    );
    expect([onlyNotes.status, onlyNotes.text]).to.deep.equal([202, ""]);
  });

  it("a missing, unknown or revoked bearer is HTTP 401 with the resource_metadata challenge and -32001", async () => {
    const revoked = await grantFor(stack, await createOwner(stack));
    await revokeGrant(stack, revoked);
    for (const headers of [
      {} as Record<string, string>,
      { authorization: "Bearer " },
      { authorization: "Basic abc" },
      { authorization: "Bearer not.a.token" },
      { authorization: `Bearer ${revoked}` },
    ]) {
      const res = await postRpc(at("/mcp/treasury"), { jsonrpc: "2.0", id: 9, method: "tools/list" }, headers);
      expect(res.status, JSON.stringify(headers)).to.equal(401);
      // Each endpoint names its own metadata and only the scopes its tools need; a token
      // that was presented and refused adds error="invalid_token" (RFC 6750 3.1).
      const presented = "authorization" in headers && /^Bearer \S/.test(headers.authorization!);
      expect(res.headers.get("www-authenticate")).to.equal(presented ? `${TREASURY_CHALLENGE}, error="invalid_token"` : TREASURY_CHALLENGE);
      expect(res.json!.id).to.equal(9);
      expect(res.json!.error.code).to.equal(-32001);
      expect(res.json!.error.data.reason_id).to.equal("invalid_token");
    }
    // A notification without a bearer: 401, still no body.
    const note = await postRpc(at("/mcp/read"), { jsonrpc: "2.0", method: "notifications/initialized" });
    expect([note.status, note.text, note.headers.get("www-authenticate")]).to.deep.equal([401, "", READ_CHALLENGE]);
  });

  it("hostile: positional params with a bad bearer are 401 first, as every refusal the gateway makes itself", async () => {
    const revoked = await grantFor(stack, await createOwner(stack));
    await revokeGrant(stack, revoked);
    for (const body of [
      '{"jsonrpc":"2.0","id":3,"method":"accounts.balance","params":[]}',
      '{"jsonrpc":"2.0","id":3,"method":"tools/call","params":["accounts.balance"]}',
    ]) {
      const res = await postRpc(at("/mcp/read"), body, { authorization: `Bearer ${revoked}` });
      expect([res.status, res.headers.get("www-authenticate")], body).to.deep.equal([401, `${READ_CHALLENGE}, error="invalid_token"`]);
      expectJsonRpcError({ json: res.json, text: res.text }, -32001, "invalid_token");
      // With a valid bearer the same body is -32602.
      expectJsonRpcError(await postRpc(at("/mcp/read"), body, auth), -32602, "invalid_params");
    }
  });

  it("unknown methods are -32601; a tool on another category's endpoint is -32601 wrong_endpoint", async () => {
    const unknown = await postRpc(at("/mcp/read"), { jsonrpc: "2.0", id: 1, method: "payments.refund", params: {} }, auth);
    expect([unknown.json!.error.code, unknown.json!.error.data.reason_id]).to.deep.equal([-32601, "method_not_found"]);
    const wrong = await postRpc(at("/mcp/treasury"), { jsonrpc: "2.0", id: 2, method: "payments.simulate", params: {} }, auth);
    expect([wrong.json!.error.code, wrong.json!.error.data.reason_id, wrong.json!.error.data.endpoint]).to.deep.equal([
      -32601,
      "wrong_endpoint",
      `${TEST_MCP_URL}/mcp/write`,
    ]);
    const wrongCall = await postRpc(
      at("/mcp/read"),
      { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "agent.budget.create", arguments: {} } },
      auth,
    );
    expect([wrongCall.json!.error.code, wrongCall.json!.error.data.reason_id]).to.deep.equal([-32601, "wrong_endpoint"]);
    const unknownTool = await postRpc(at("/mcp/read"), { jsonrpc: "2.0", id: 4, method: "tools/call", params: { name: "x.y", arguments: {} } }, auth);
    expect([unknownTool.json!.error.code, unknownTool.json!.error.data.reason_id]).to.deep.equal([-32602, "unknown_tool"]);
  });

  it("a tool on another endpoint with params that are not an object is -32601 wrong_endpoint, and the server keeps answering", async () => {
    const cases: [string, Record<string, string>, string][] = [
      [`{"jsonrpc":"2.0","id":1,"method":"agent.grant.refresh","params":[]}`, {}, "/mcp/read"],
      [`{"jsonrpc":"2.0","id":1,"method":"accounts.balance","params":["x"]}`, auth, "/mcp/write"],
      [`[{"jsonrpc":"2.0","id":1,"method":"accounts.balance","params":[7]},{"jsonrpc":"2.0","id":2,"method":"ping"}]`, auth, "/mcp/treasury"],
    ];
    for (const [body, headers, path] of cases) {
      const res = await postRpc(at(path), body, headers);
      expectJsonRpcError({ json: Array.isArray(res.json) ? res.json[0] : res.json, text: res.text }, -32601, "wrong_endpoint");
      // A refusal left unawaited would end the process on the next tick.
      await new Promise((r) => setImmediate(r));
      const ping = await postRpc(at("/mcp/read"), { jsonrpc: "2.0", id: 9, method: "ping" }, auth);
      expect(ping.json!.result).to.deep.equal({});
    }
  });

  it("initialize negotiates the protocol revision", async () => {
    const init = (v: string) =>
      postRpc(
        at("/mcp/write"),
        { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: v, capabilities: {}, clientInfo: { name: "t", version: "1" } } },
        auth,
      );
    expect((await init("2025-06-18")).json!.result.protocolVersion).to.equal("2025-06-18");
    const newest = (await init("1999-01-01")).json!.result;
    expect(newest.protocolVersion).to.equal("2025-11-25");
    expect(newest.capabilities).to.deep.equal({ tools: { listChanged: false } });
    expect(newest.serverInfo.name).to.equal("vaultgate");
    expect((await init("2025-11-25")).headers.get("mcp-session-id")).to.match(/^mcp1\./);
  });

  it("ping, like every method, takes params as an object only: an array is -32602", async () => {
    expect((await postRpc(at("/mcp/read"), { jsonrpc: "2.0", id: 7, method: "ping", params: {} }, auth)).json).to.deep.equal({
      jsonrpc: "2.0",
      id: 7,
      result: {},
    });
    const res = await postRpc(at("/mcp/read"), { jsonrpc: "2.0", id: 8, method: "ping", params: [] }, auth);
    expectJsonRpcError(res, -32602, "invalid_params");
  });

  it("initialize sent as a notification negotiates nothing: 202, no body and no Mcp-Session-Id", async () => {
    const params = { protocolVersion: "2025-11-25", capabilities: { elicitation: { url: {} } }, clientInfo: { name: "t", version: "1" } };
    for (const body of [{ jsonrpc: "2.0", method: "initialize", params }, [{ jsonrpc: "2.0", method: "initialize", params }]]) {
      const res = await postRpc(at("/mcp/write"), body, auth);
      expect([res.status, res.text, res.headers.get("mcp-session-id")]).to.deep.equal([202, "", null]);
    }
  });

  it("tools/list per category with 2020-12 input and output schemas and the tool annotations", async () => {
    const list = async (path: string) => (await postRpc(at(path), { jsonrpc: "2.0", id: 1, method: "tools/list" }, auth)).json!.result.tools as Tool[];
    const names = async (path: string) => (await list(path)).map((t) => t.name);
    expect(await names("/mcp/read")).to.deep.equal(["payments.get", "accounts.balance", "audit.list"]);
    expect(await names("/mcp/write")).to.deep.equal(["payments.initiate", "payments.simulate"]);
    expect(await names("/write")).to.deep.equal(["payments.initiate", "payments.simulate"]);
    expect(await names("/mcp/treasury")).to.deep.equal([
      "agent.budget.create",
      "agent.budget.fund",
      "agent.budget.revoke",
      "agent.budget.sweep",
      "agent.grant.issue",
      "agent.grant.refresh",
      "killSwitch.all",
    ]);
    // One page, no nextCursor; a cursor we never issued is -32602 (MCP pagination).
    const page = await postRpc(at("/mcp/read"), { jsonrpc: "2.0", id: 1, method: "tools/list", params: { _meta: {} } }, auth);
    expect(page.json!.result).to.not.have.property("nextCursor");
    expectJsonRpcError(
      await postRpc(at("/mcp/read"), { jsonrpc: "2.0", id: 1, method: "tools/list", params: { cursor: "e30" } }, auth),
      -32602,
      "invalid_params",
    );
    const ajv = createSchemaAjv();
    for (const path of ["/mcp/read", "/mcp/write", "/mcp/treasury"]) {
      for (const tool of await list(path)) {
        expect(tool.inputSchema.$schema).to.equal("https://json-schema.org/draft/2020-12/schema");
        expect(tool.outputSchema?.$schema).to.equal("https://json-schema.org/draft/2020-12/schema");
        expect(tool.inputSchema.type).to.equal("object");
        ajv.compile(tool.inputSchema);
        ajv.compile(tool.outputSchema!);
        // JSON Schema 2020-12: "$schema" only at a resource root, never in a subschema.
        for (const schema of [tool.inputSchema, tool.outputSchema!]) {
          const { $schema: _, ...below } = schema;
          expect(JSON.stringify(below), tool.name).to.not.include('"$schema"');
        }
      }
    }
    const create = (await list("/mcp/treasury")).find((t) => t.name === "agent.budget.create")!;
    expect(create.annotations).to.deep.equal({
      title: "Create Agent Budget",
      readOnlyHint: false,
      destructiveHint: false,
      idempotentHint: true,
      openWorldHint: false,
    });
    expect(create._meta?.requiresHumanApproval).to.equal(true);
    expect(create._meta?.scope).to.equal("agent:budget:create");
    // `_meta.scopes` names every scope that lets a grant call the tool, as core decides it.
    const metaScopes = async (path: string) => Object.fromEntries((await list(path)).map((t) => [t.name, t._meta?.scopes]));
    expect(await metaScopes("/mcp/read")).to.deep.equal({
      "accounts.balance": ["accounts:read"],
      "audit.list": ["audit:stream"],
      "payments.get": ["accounts:read", "payments:initiate"],
    });
    expect((await metaScopes("/mcp/treasury"))["killSwitch.all"]).to.deep.equal([]);
    expect(create.inputSchema.additionalProperties).to.equal(false);
    expect(create.inputSchema.required).to.deep.equal(["purpose", "display_name", "chain_allowlist", "idempotency_key"]);
    // The published outputSchema is the creation result exactly; a refusal (isError) has
    // no structuredContent, so the schema allows no error shape.
    const UTC = "^\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(\\.\\d{1,9})?Z$";
    expect(create.outputSchema).to.deep.equal({
      $schema: "https://json-schema.org/draft/2020-12/schema",
      type: "object",
      properties: {
        agent_principal_id: { type: "string", format: "uuid" },
        vault_id: { type: "string", format: "uuid" },
        policy_version: { type: "integer", minimum: 0, maximum: 9007199254740991 },
        status: { type: "string", enum: ["draft", "active"] },
        created_at: { type: "string", format: "date-time", pattern: UTC },
      },
      required: ["agent_principal_id", "vault_id", "policy_version", "status", "created_at"],
      additionalProperties: false,
    });
    const validate = ajv.compile(create.outputSchema!);
    const result = {
      agent_principal_id: "0190a5a4-0000-7000-8000-000000000001",
      vault_id: "0190a5a4-0000-7000-8000-000000000002",
      policy_version: 0,
      status: "draft",
      created_at: "2026-01-02T03:04:05.678Z",
    };
    expect(validate(result)).to.equal(true);
    expect(validate({ ...result, created_at: "2026-01-02T04:04:05.678+01:00" }), "UTC with Z only").to.equal(false);
    expect(validate({ error: { code: -32602, message: "Invalid params", data: {} } }), "no error shape").to.equal(false);
    expect(validate({ ...result, extra: 1 })).to.equal(false);
    // No tool publishes an error branch: every outputSchema is the tool's result alone.
    for (const path of ["/mcp/read", "/mcp/write", "/mcp/treasury"]) {
      for (const tool of await list(path)) {
        expect(JSON.stringify(tool.outputSchema), tool.name).to.not.match(/"anyOf"|"error"/);
        expect(ajv.compile(tool.outputSchema!)({ error: { code: -32602, message: "Invalid params", data: {} } }), tool.name).to.equal(false);
      }
    }
  });

  it("time_window_end's published schema says what the server takes: UTC with Z, seconds optional, no offset", async () => {
    const tools = (await postRpc(at("/mcp/treasury"), { jsonrpc: "2.0", id: 1, method: "tools/list" }, auth)).json!.result.tools as Tool[];
    const create = tools.find((t) => t.name === "agent.budget.create")!;
    // A host's validator without our format code: 2020-12 reads format as an annotation.
    const published = new Ajv2020({ validateFormats: false }).compile(create.inputSchema);
    const args = (end: string) => ({ purpose: "trip", display_name: "Trip", chain_allowlist: ["base"], idempotency_key: "key-tw-0001", time_window_end: end });
    for (const end of ["2030-01-01T00:00Z", "2030-01-01T00:00:00.5Z"]) expect(published(args(end)), end).to.equal(true);
    for (const end of ["2030-01-01T02:00:00+02:00", "2030-01-01T00:00:00z", "2030-01-01 00:00:00Z"]) {
      expect(published(args(end)), end).to.equal(false);
      const res = await postRpc(at("/mcp/treasury"), { jsonrpc: "2.0", id: 2, method: "agent.budget.create", params: args(end) }, auth);
      expectJsonRpcError(res, -32602, "invalid_params");
      expect(res.json!.error.data.errors[0].path, end).to.equal("/time_window_end");
    }
  });

  it("only POST: GET and DELETE are 405; other content types 415; oversized bodies 413 -32600", async () => {
    const get = await fetch(at("/mcp/write"), { headers: auth });
    expect([get.status, get.headers.get("allow")]).to.deep.equal([405, "POST"]);
    const text = await fetch(at("/mcp/write"), { method: "POST", headers: { ...auth, "content-type": "text/plain" }, body: "{}" });
    expect(text.status).to.equal(415);
    expect(((await text.json()) as JsonRpcReply).error?.code).to.equal(-32600);
    const big = await postRpc(at("/mcp/write"), { jsonrpc: "2.0", id: 1, method: "ping", params: { pad: "x".repeat(70_000) } }, auth);
    expect(big.status).to.equal(413);
    expect(big.json!.error.code).to.equal(-32600);
  });
});
