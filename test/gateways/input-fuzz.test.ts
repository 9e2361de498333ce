import { expect } from "chai";
import fc from "fast-check";
import { fundedChildBudget } from "../support/budgets.js";
import { FUZZ, wellFormed } from "../support/fuzz.js";
import { postRpc, startMcpStack, type McpStack } from "../support/mcp.js";
import { createPartner, mintPartnerToken } from "../support/partners.js";

/**
 * Whatever a caller sends, every public surface answers with a clear refusal, never a 5xx or an
 * internal error: arguments are built from each tool's and route's own field names with hostile values.
 */
describe("hostile input on every public surface: never a 5xx", function () {
  this.timeout(600_000);
  const { runs: RUNS, seed: SEED } = FUZZ;
  let stack: McpStack;
  let agentToken: string;
  let partnerToken: string;
  let vaultId: string;

  before(async () => {
    stack = await startMcpStack();
    ({ agentToken, vaultId } = await fundedChildBudget(stack, { fundCents: 1_000_000n, budget: { display_name: "Fuzz", chain_allowlist: ["base", "sol"] } }));
    partnerToken = await mintPartnerToken(stack, await createPartner(stack));
  });
  after(async () => {
    await stack?.close();
  });

  const nastyString = fc.oneof(
    fc.string({ maxLength: 40 }),
    fc.string({ unit: "binary", maxLength: 40 }),
    fc.constantFrom("", " ", "\u0000", "\ud800", "%", "%00", "../..", "0x", "USDC", "base", "sol", "USD", "1e309", "-0", "null", "__proto__"),
    fc.constantFrom("a".repeat(5000), "\u{1F600}".repeat(300), `0x${"f".repeat(40)}`, "00000000-0000-0000-0000-000000000000"),
    fc.uuid(),
  );
  const nastyNumber = fc.oneof(
    fc.integer(),
    fc.double(),
    fc.constantFrom(0, -1, 1, 2 ** 53, 2 ** 53 + 2, 2 ** 63, -(2 ** 63), 1e308, -1e308, 0.5, Number.MIN_VALUE),
  );
  const leaf = fc.oneof(nastyString, nastyNumber, fc.boolean(), fc.constant(null), fc.jsonValue({ maxDepth: 3 }));

  type Schema = { type?: string | string[]; properties?: Record<string, Schema>; items?: Schema };
  /** Objects with the schema's own field names, each value hostile or (for an object) built the same way. */
  const fromSchema = (schema: Schema, depth = 0): fc.Arbitrary<unknown> => {
    const props = Object.entries(schema.properties ?? {});
    const own =
      props.length === 0 || depth > 3
        ? leaf
        : fc.record(Object.fromEntries(props.map(([k, s]) => [k, fc.oneof(leaf, fromSchema(s, depth + 1))])), { requiredKeys: [] });
    const array = schema.items ? fc.array(fc.oneof(leaf, fromSchema(schema.items, depth + 1)), { maxLength: 4 }) : leaf;
    return fc.oneof(own, array, leaf);
  };

  const refusedWell = (what: string, status: number, text: string) => {
    expect(status, `${what}: ${text.slice(0, 500)}`).to.be.below(500);
    expect(text, what).to.not.match(/-32603|internal_error|Internal Server Error/);
  };
  const errorLines = () => stack.logs.lines.filter((l) => JSON.parse(l).level >= 50);

  it("MCP tools, as tools/call and as methods, with hostile arguments", async () => {
    const paths = ["/mcp/read", "/mcp/write", "/mcp/treasury"];
    for (const path of paths) {
      const listed = await postRpc(
        `${stack.url}${path}`,
        { jsonrpc: "2.0", id: 1, method: "tools/list", params: {} },
        { authorization: `Bearer ${agentToken}` },
      );
      const tools = (listed.json!.result as { tools: { name: string; inputSchema: Schema }[] }).tools.filter((t) => t.name !== "killSwitch.all");
      for (const tool of tools) {
        await fc.assert(
          fc.asyncProperty(fromSchema(tool.inputSchema), fc.boolean(), async (args, direct) => {
            const body = direct
              ? { jsonrpc: "2.0", id: 7, method: tool.name, params: args }
              : { jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: tool.name, arguments: args } };
            const r = await postRpc(`${stack.url}${path}`, body, { authorization: `Bearer ${agentToken}` });
            refusedWell(`${path} ${tool.name} ${JSON.stringify(args).slice(0, 300)}`, r.status, r.text);
          }),
          { numRuns: RUNS, seed: SEED },
        );
      }
    }
    expect(errorLines()).to.deep.equal([]);
  });

  it("MCP tools with one field of a well-formed call made hostile or left out", async () => {
    const payment = {
      counterparty: { address: "0xabc0000000000000000000000000000000000001", chain: "base", token: "USDC" },
      amount_cents: 100,
      currency: "USD",
      idempotency_key: "fuzz-payment-1",
    };
    const examples: [string, string, Record<string, unknown>][] = [
      ["/mcp/write", "payments.initiate", payment],
      ["/mcp/write", "payments.simulate", payment],
      ["/mcp/read", "payments.get", { payment_id: "00000000-0000-4000-8000-000000000000" }],
      ["/mcp/read", "audit.list", { limit: 10, cursor: "", since: "2026-01-01T00:00:00Z" }],
      [
        "/mcp/treasury",
        "agent.budget.create",
        {
          purpose: "trip",
          display_name: "Sub",
          chain_allowlist: ["base"],
          amount_cap_cents_per_tx: 100,
          time_window_end: "2099-01-01T00:00:00Z",
          idempotency_key: "fuzz-sub-1",
        },
      ],
      ["/mcp/treasury", "agent.budget.fund", { vault_id: vaultId, amount_cents: 100, idempotency_key: "fuzz-fund-1" }],
      ["/mcp/treasury", "agent.budget.sweep", { vault_id: vaultId }],
      ["/mcp/treasury", "agent.grant.issue", { vault_id: vaultId, scopes: ["accounts:read"] }],
    ];
    /** Every path to a value in `v`, objects and arrays included. */
    const paths = (v: unknown, at: (string | number)[] = []): (string | number)[][] =>
      v && typeof v === "object"
        ? [at, ...Object.entries(v).flatMap(([k, x]) => paths(x, [...at, Array.isArray(v) ? Number(k) : k]))].filter((p) => p.length > 0)
        : [at];
    const mutate = (v: Record<string, unknown>, path: (string | number)[], to: unknown, drop: boolean) => {
      const copy = structuredClone(v);
      let parent = copy as Record<string | number, unknown>;
      for (const key of path.slice(0, -1)) parent = parent[key] as Record<string | number, unknown>;
      if (drop) delete parent[path.at(-1)!];
      else parent[path.at(-1)!] = to;
      return copy;
    };
    for (const [path, tool, example] of examples) {
      await fc.assert(
        fc.asyncProperty(fc.constantFrom(...paths(example)), leaf, fc.boolean(), fc.boolean(), async (at, to, drop, direct) => {
          const args = mutate(example, at, to, drop);
          const body = direct
            ? { jsonrpc: "2.0", id: 7, method: tool, params: args }
            : { jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: tool, arguments: args } };
          const r = await postRpc(`${stack.url}${path}`, body, { authorization: `Bearer ${agentToken}` });
          refusedWell(`${path} ${tool} ${JSON.stringify(args).slice(0, 300)}`, r.status, r.text);
        }),
        { numRuns: RUNS * 2, seed: SEED },
      );
    }
    expect(errorLines()).to.deep.equal([]);
  });

  it("JSON-RPC envelopes and batches of any shape, on every MCP path", async () => {
    const methods = fc.constantFrom(
      "initialize",
      "tools/list",
      "tools/call",
      "ping",
      "notifications/initialized",
      "payments.initiate",
      "accounts.balance",
      "x",
      "",
    );
    const envelope = fc.record(
      {
        jsonrpc: fc.oneof(fc.constant("2.0"), leaf),
        id: fc.oneof(fc.integer(), nastyString, fc.constant(null), leaf),
        method: fc.oneof(methods, leaf),
        params: leaf,
      },
      { requiredKeys: [] },
    );
    const body = fc.oneof(envelope, fc.array(fc.oneof(envelope, leaf), { maxLength: 25 }), leaf);
    await fc.assert(
      fc.asyncProperty(fc.constantFrom("/mcp/read", "/mcp/write", "/mcp/treasury", "/mcp"), body, fc.boolean(), async (path, b, withToken) => {
        const r = await postRpc(`${stack.url}${path}`, JSON.stringify(b), withToken ? { authorization: `Bearer ${agentToken}` } : {});
        refusedWell(`${path} ${JSON.stringify(b).slice(0, 300)}`, r.status, r.text);
      }),
      { numRuns: RUNS * 5, seed: SEED },
    );
    expect(errorLines()).to.deep.equal([]);
  });

  it("partner routes with hostile path segments, queries and bodies", async () => {
    // Every operation the partner API publishes, so a new route is covered without a list to keep.
    type Operation = { parameters?: { in: string; name: string }[]; requestBody?: { content: Record<string, { schema: Schema }> } };
    const doc = (await (await fetch(`${stack.url}/api/partner/openapi.json`)).json()) as {
      paths: Record<string, Record<string, Operation>>;
      components: { schemas: Record<string, Schema> };
    };
    const deref = (v: unknown, depth = 0): Schema => {
      if (!v || typeof v !== "object" || depth > 6) return {};
      const ref = (v as { $ref?: string }).$ref;
      if (ref) return deref(doc.components.schemas[ref.split("/").at(-1)!], depth + 1);
      const out: Record<string, unknown> = {};
      for (const [k, x] of Object.entries(v))
        out[k] =
          k === "properties"
            ? Object.fromEntries(Object.entries(x as object).map(([n, y]) => [n, deref(y, depth + 1)]))
            : k === "items"
              ? deref(x, depth + 1)
              : x;
      return out as Schema;
    };
    // The document itself names every error code, internal_error included.
    const operations = Object.entries(doc.paths)
      .filter(([path]) => path !== "/openapi.json")
      .flatMap(([path, methods]) =>
        Object.entries(methods)
          .filter(([method]) => ["get", "post", "put", "patch", "delete"].includes(method))
          .map(([method, op]) => ({
            method: method.toUpperCase(),
            path: `/api/partner${path}`,
            query: (op.parameters ?? []).filter((q) => q.in === "query").map((q) => q.name),
            body: deref(op.requestBody?.content["application/json"]?.schema),
          })),
      );
    expect(operations.length).to.be.greaterThan(8);
    await fc.assert(
      fc.asyncProperty(
        fc
          .constantFrom(...operations)
          .chain((op) =>
            fc.tuple(fc.constant(op), fromSchema(op.body), fc.dictionary(fc.constantFrom("cursor", "limit", ...op.query), nastyString, { maxKeys: 3 })),
          ),
        fc.oneof(nastyString, fc.uuid()),
        async ([op, body, query], id) => {
          const qs = new URLSearchParams(query as Record<string, string>).toString();
          const segment = encodeURIComponent(wellFormed(id));
          const url = `${stack.url}${op.path.replace(/\{[^}]+\}/g, segment)}${qs ? `?${qs}` : ""}`;
          const headers: Record<string, string> = { authorization: `Bearer ${partnerToken}`, "idempotency-key": segment.slice(0, 200) || "k" };
          const withBody = op.method !== "GET" && op.method !== "DELETE";
          if (withBody) headers["content-type"] = "application/json";
          const r = await fetch(url, { method: op.method, headers, ...(withBody ? { body: JSON.stringify(body) } : {}) });
          refusedWell(`${op.method} ${url} ${JSON.stringify(body).slice(0, 300)}`, r.status, await r.text());
        },
      ),
      { numRuns: RUNS * 10, seed: SEED },
    );
    expect(errorLines()).to.deep.equal([]);
  });

  it("OAuth endpoints with hostile registrations, forms and queries", async () => {
    const reg = {
      client_name: {},
      redirect_uris: { items: {} },
      grant_types: { items: {} },
      response_types: { items: {} },
      token_endpoint_auth_method: {},
      scope: {},
      client_uri: {},
      logo_uri: {},
      contacts: { items: {} },
      software_id: {},
    };
    await fc.assert(
      fc.asyncProperty(fromSchema({ properties: reg }), async (body) => {
        const r = await fetch(`${stack.url}/oauth2/register`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
        refusedWell(`register ${JSON.stringify(body).slice(0, 300)}`, r.status, await r.text());
      }),
      { numRuns: RUNS * 3, seed: SEED },
    );
    const formNames = [
      "grant_type",
      "code",
      "redirect_uri",
      "client_id",
      "client_secret",
      "code_verifier",
      "refresh_token",
      "scope",
      "resource",
      "token",
      "token_type_hint",
    ];
    for (const path of ["/oauth2/token", "/oauth2/revoke", "/api/partner/oauth/token"]) {
      await fc.assert(
        fc.asyncProperty(fc.dictionary(fc.constantFrom(...formNames), nastyString, { maxKeys: 6 }), async (form) => {
          const r = await fetch(`${stack.url}${path}`, {
            method: "POST",
            headers: { "content-type": "application/x-www-form-urlencoded" },
            body: new URLSearchParams(form as Record<string, string>).toString(),
          });
          refusedWell(`${path} ${JSON.stringify(form).slice(0, 300)}`, r.status, await r.text());
        }),
        { numRuns: RUNS * 3, seed: SEED },
      );
    }
    const queryNames = ["response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method", "resource", "prompt"];
    await fc.assert(
      fc.asyncProperty(fc.dictionary(fc.constantFrom(...queryNames), nastyString, { maxKeys: 7 }), async (query) => {
        const r = await fetch(`${stack.url}/oauth2/authorize?${new URLSearchParams(query as Record<string, string>)}`, { redirect: "manual" });
        refusedWell(`authorize ${JSON.stringify(query).slice(0, 300)}`, r.status, await r.text());
      }),
      { numRuns: RUNS * 3, seed: SEED },
    );
    expect(errorLines()).to.deep.equal([]);
  });
});
