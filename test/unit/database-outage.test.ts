import { expect } from "chai";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../../core/errors.js";
import { databaseOutage } from "../../core/interceptors.js";

const pgError = (code: string, message = "x") => Object.assign(new Error(message), { code });
const caught = (f: () => never) => {
  try {
    f();
  } catch (e) {
    return e;
  }
};

/** Which driver errors mean "the database is not there" (503) and which are bugs or refusals. */
describe("databaseOutage classification", () => {
  const outages: [string, unknown][] = [
    ["admin shutdown 57P01", pgError("57P01", "terminating connection due to administrator command")],
    ["connection exception 08006", pgError("08006")],
    ["too many connections 53300", pgError("53300")],
    ["connection refused", pgError("ECONNREFUSED")],
    ["refused on every address (AggregateError)", new AggregateError([pgError("ECONNREFUSED")], "")],
    ["connection terminated, prefixed with SQL by knex", new Error("select 1 - Connection terminated unexpectedly")],
    ["pool acquire timeout", Object.assign(new Error("Knex: Timeout acquiring a connection. The pool is probably full."), { name: "KnexTimeoutError" })],
    ["wrapped as AUDIT_UNAVAILABLE", caught(() => fail(Reason.AUDIT_UNAVAILABLE, "audit", {}, pgError("57P01")))],
  ];
  for (const [label, err] of outages) it(`${label} is an outage`, () => expect(databaseOutage(err)).to.be.a("string"));

  const others: [string, unknown][] = [
    ["unique violation 23505", pgError("23505")],
    ["invalid json 22P02", pgError("22P02", "invalid input syntax for type json")],
    ["a plain bug", new TypeError("x is undefined")],
    ["a domain refusal whatever its cause", caught(() => fail(Reason.INVALID_REQUEST, "bad", {}, pgError("ECONNREFUSED")))],
  ];
  for (const [label, err] of others) it(`${label} is not`, () => expect(databaseOutage(err)).to.equal(undefined));
});
