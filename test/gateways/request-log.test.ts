import { expect } from "chai";
import { startStack, type TestStack } from "../support/stack.js";

/** The gateway writes one info line per request, after the response, with no query string. */
describe("request log", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(async () => {
    await stack.close();
  });

  const linesFor = (requestId: string) =>
    stack.logs.lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((e) => e.reqId === requestId);

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
});
