import { expect } from "chai";
import { isDateTime, parseDateTime } from "../../gateways/jsonrpc/date-time.js";
import { createSchemaAjv } from "../../gateways/jsonrpc/schemas.js";

describe("date-time strings", () => {
  const valid = [
    "2026-01-31T10:00Z",
    "2026-01-31T10:00:59Z",
    "2026-01-31T23:59:59.5Z",
    "2026-01-31T00:00:00.123456789Z",
    "2026-01-31T00:00:00.1234567890123Z",
    "2024-02-29T12:00Z",
    "2000-02-29T12:00Z",
    "2026-12-31T23:59Z",
  ];
  const invalid = [
    "2023-02-29T12:00Z", // not a leap year
    "1900-02-29T12:00Z", // century, not divisible by 400
    "2026-04-31T12:00Z",
    "2026-13-01T12:00Z",
    "2026-00-10T12:00Z",
    "2026-01-00T12:00Z",
    "2026-01-31T24:00Z",
    "2026-01-31T12:60Z",
    "2026-01-31T12:00:60Z",
    "2026-01-31T12:00",
    "2026-01-31T12:00+00:00",
    "2026-01-31t12:00z",
    "2026-01-31 12:00Z",
    "2026-01-31T12Z",
    "2026-01-31T12:00.5Z", // a fraction needs seconds
    "2026-01-31T12:00:00.Z",
    "26-01-31T12:00Z",
    "2026-1-31T12:00Z",
    "",
  ];
  for (const v of valid) it(`accepts ${v}`, () => expect(isDateTime(v)).to.equal(true));
  for (const v of invalid) it(`refuses ${JSON.stringify(v)}`, () => expect(isDateTime(v)).to.equal(false));

  it("parses to the instant it names", () => {
    expect(parseDateTime("2024-02-29T23:05Z")!.toISOString()).to.equal("2024-02-29T23:05:00.000Z");
    expect(parseDateTime("2024-02-29T23:05:07.25Z")!.toISOString()).to.equal("2024-02-29T23:05:07.250Z");
  });

  it("is the format Ajv 2020 validates tool schemas with", () => {
    const validate = createSchemaAjv().compile({ $schema: "https://json-schema.org/draft/2020-12/schema", type: "string", format: "date-time" });
    expect(validate("2024-02-29T12:00Z")).to.equal(true);
    expect(validate("2023-02-29T12:00Z")).to.equal(false);
    expect(validate("2023-02-28T12:00:00+01:00")).to.equal(false);
  });
});
