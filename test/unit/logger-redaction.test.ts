import { expect } from "chai";
import { createLogger } from "../../cli/logger.js";

/** A logger at info whose lines are parsed into `lines`. */
function capture() {
  const lines: Record<string, unknown>[] = [];
  const logger = createLogger("info", { write: (s: string) => void lines.push(JSON.parse(s) as Record<string, unknown>) });
  return { logger, lines };
}

const SECRET = "s3cr3t-value";

describe("log redaction", () => {
  it("blanks every secret field at the top level", () => {
    const { logger, lines } = capture();
    for (const key of ["authorization", "cookie", "client_secret", "refresh_token", "access_token", "password", "token", "secret"]) {
      logger.info({ [key]: SECRET, keep: "visible" }, "line");
      expect(lines.at(-1)).to.include({ [key]: "[redacted]", keep: "visible" });
    }
  });

  it("blanks secret fields one level down, under any key", () => {
    const { logger, lines } = capture();
    for (const key of [
      "client_secret",
      "clientSecret",
      "refresh_token",
      "refreshToken",
      "access_token",
      "accessToken",
      "code",
      "code_verifier",
      "password",
      "token",
      "secret",
    ]) {
      logger.info({ body: { [key]: SECRET, grant_type: "refresh_token" } }, "line");
      expect(lines.at(-1)!.body).to.deep.equal({ [key]: "[redacted]", grant_type: "refresh_token" });
    }
    expect(JSON.stringify(lines)).not.to.include(SECRET);
  });

  it("blanks the authorization and cookie headers of a request, and a bare headers object's authorization", () => {
    const { logger, lines } = capture();
    logger.info({ headers: { authorization: `Bearer ${SECRET}`, accept: "application/json" } }, "line");
    expect(lines.at(-1)!.headers).to.deep.equal({ authorization: "[redacted]", accept: "application/json" });
    // req goes through the request serializer (method, path, id), so check what reaches it.
    const seen: unknown[] = [];
    const logger2 = createLogger("info", { write: (s: string) => void seen.push(s) });
    logger2.info({ reqLike: { headers: { authorization: SECRET } } }, "line");
    expect(String(seen[0])).to.include(SECRET); // only req.headers and headers are header paths
    logger.info({ data: { headers: { cookie: SECRET } } }, "line");
    expect(JSON.stringify(lines.at(-1))).to.include(SECRET); // a third level is not walked
  });

  it("blanks secrets in a child logger's bindings", () => {
    const { logger, lines } = capture();
    logger.child({ token: SECRET, requestId: "r-1" }).info("line");
    expect(lines.at(-1)).to.include({ token: "[redacted]", requestId: "r-1" });
  });

  it("keeps an error's message and stack while blanking its secret fields", () => {
    const { logger, lines } = capture();
    const err = Object.assign(new Error("connection refused"), { code: "ECONNREFUSED", token: SECRET });
    logger.error({ err }, "failed");
    const logged = lines.at(-1)!.err as Record<string, unknown>;
    expect(logged.message).to.equal("connection refused");
    expect(String(logged.stack)).to.include("connection refused");
    expect(logged.token).to.equal("[redacted]");
    expect(JSON.stringify(lines)).not.to.include(SECRET);
    // The caller's error is untouched.
    expect(err.token).to.equal(SECRET);
  });

  it("never changes the caller's objects and leaves lines without secrets as they are", () => {
    const { logger, lines } = capture();
    const fields = { method: "GET", url: "/api/partner/users/:id/kyc", status: 200, ms: 1.25, body: { token: SECRET } };
    logger.info(fields, "request");
    expect(fields.body.token).to.equal(SECRET);
    logger.info({ method: "GET", url: "/x", status: 200, ms: 1.5 }, "request");
    expect(lines.at(-1)).to.include({ method: "GET", url: "/x", status: 200, ms: 1.5, msg: "request" });
  });
});
