import { expect } from "chai";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../support/stack.js";
import { expectRefused } from "../support/refusals.js";

/**
 * The gateway writes one info line per request, after the response, with no query string;
 * a request core refuses is still one line, naming core's reason.
 */
describe("request log", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(async () => {
    await stack.close();
  });

  const linesFor = (requestId: string) => stack.logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((e) => e.reqId === requestId);
  /** Every line about the request: the gateway's (reqId) and core's (requestId). */
  const everyLineFor = (requestId: string) =>
    stack.logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((e) => e.reqId === requestId || e.requestId === requestId);
  /** Sends the request and waits for its line (written when the response is done). */
  const send = async (path: string, init: RequestInit = {}) => {
    const res = await fetch(`${stack.url}${path}`, { redirect: "manual", ...init });
    await res.arrayBuffer();
    const requestId = res.headers.get("x-request-id")!;
    for (let i = 0; i < 100 && !linesFor(requestId).some((e) => e.msg === "request"); i++) await new Promise((r) => setTimeout(r, 10));
    return { status: res.status, lines: everyLineFor(requestId) };
  };
  const form = (fields: Record<string, string>, headers: Record<string, string> = {}): RequestInit => ({
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
    body: new URLSearchParams(fields).toString(),
  });
  const rpc = (body: unknown, bearer: string): RequestInit => ({
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", authorization: `Bearer ${bearer}` },
    body: JSON.stringify(body),
  });

  it("logs one line per request with method, route, status, duration and request id", async () => {
    const res = await fetch(`${stack.url}/api/partner/users/00000000-0000-4000-8000-000000000000/kyc?code=secret-code&state=s`, {
      headers: { authorization: "Bearer not-a-token" },
    });
    await res.arrayBuffer();
    const requestId = res.headers.get("x-request-id")!;
    const lines = linesFor(requestId);
    const requestLines = lines.filter((e) => e.msg === "request");
    expect(requestLines).to.have.length(1);
    const [line] = requestLines;
    expect(line).to.include({ method: "GET", url: "/api/partner/users/:id/kyc", status: res.status, level: 30 });
    expect(line!.ms).to.be.a("number");
    expect(lines.some((e) => e.msg === "incoming request" || e.msg === "request completed")).to.equal(false);
    expect(stack.logs.text()).not.to.include("secret-code");
  });

  it("logs the path without its query string when no route matched", async () => {
    const res = await fetch(`${stack.url}/no/such/path?token=abc123secret`);
    await res.arrayBuffer();
    const [line] = linesFor(res.headers.get("x-request-id")!).filter((e) => e.msg === "request");
    expect(line).to.include({ method: "GET", url: "/no/such/path", status: 404 });
    expect(stack.logs.text()).not.to.include("abc123secret");
  });

  describe("a request core refuses is one line, with core's reason", () => {
    const cases: [string, () => Promise<{ status: number; lines: Record<string, unknown>[] }>, number, Reason][] = [
      [
        "partner resource, bad bearer",
        () => send("/api/partner/users/00000000-0000-4000-8000-000000000000/kyc", { headers: { authorization: "Bearer not-a-token" } }),
        401,
        Reason.INVALID_TOKEN,
      ],
      [
        "partner token, unknown client",
        () =>
          send(
            "/api/partner/oauth/token",
            form({ grant_type: "client_credentials" }, { authorization: `Basic ${Buffer.from("no-such-client:wrong").toString("base64")}` }),
          ),
        401,
        Reason.INVALID_CLIENT,
      ],
      [
        "agent token, unknown refresh token",
        () => send("/oauth2/token", form({ grant_type: "refresh_token", refresh_token: "no-such-token", client_id: "no-such-client", client_secret: "x" })),
        401,
        Reason.INVALID_CLIENT,
      ],
      ["MCP, bad bearer", () => send("/mcp/read", rpc({ jsonrpc: "2.0", id: 1, method: "tools/list" }, "not-a-token")), 401, Reason.INVALID_TOKEN],
      ["web page, stale session", () => send("/dashboard/agents", { headers: { cookie: "vg_session=not-a-session" } }), 303, Reason.INVALID_TOKEN],
    ];
    for (const [name, request, status, reason] of cases) {
      it(name, async () => {
        const answer = await request();
        expect(answer.status).to.equal(status);
        expect(answer.lines, JSON.stringify(answer.lines)).to.have.length(1);
        expect(answer.lines[0]).to.include({ msg: "request", level: 30, status, reason: Reason[reason] });
      });
    }

    it("a JSON-RPC batch names each distinct reason once", async () => {
      const refresh = { name: "agent.grant.refresh", arguments: { refresh_token: "no-such-token", client_id: "no-such-client", client_secret: "x" } };
      const answer = await send(
        "/mcp/treasury",
        rpc(
          [
            { jsonrpc: "2.0", id: 1, method: "tools/call", params: refresh },
            { jsonrpc: "2.0", id: 2, method: "tools/call", params: refresh },
            { jsonrpc: "2.0", id: 3, method: "ping" },
          ],
          "not-a-token",
        ),
      );
      expect(answer.lines, JSON.stringify(answer.lines)).to.have.length(1);
      expect(String(answer.lines[0]!.reason).split(",").sort()).to.deep.equal([Reason[Reason.INVALID_CLIENT], Reason[Reason.INVALID_TOKEN]].sort());
    });

    it("a successful request's line has no reason", async () => {
      const answer = await send("/healthz");
      expect(answer.lines).to.have.length(1);
      expect(answer.lines[0]).to.not.have.property("reason");
    });

    it("a caller outside the process still gets core's own line (operator RPC over a real transport)", async () => {
      const before = stack.logs.lines.length;
      await expectRefused(stack.admin.partners.getPartner({ clientId: "no-such-client" }), Reason.NOT_FOUND);
      const refused = stack.logs.lines
        .slice(before)
        .map((l) => JSON.parse(l) as Record<string, unknown>)
        .filter((e) => e.msg === "rpc refused");
      expect(refused).to.have.length(1);
      expect(refused[0]).to.include({ level: 30, reason: Reason[Reason.NOT_FOUND] });
    });
  });
});
