import { expect } from "chai";
import { parseForm } from "../../gateways/shared/form.js";
import { resolveTokenScopes } from "../../core/partners/scopes.js";
import { constantTimeEqual } from "../../lib/crypto.js";
import { generateClientId, generateClientSecret, slugFromName } from "../../core/partners/credentials.js";
import { createSecretHasher } from "../../core/secrets/hasher.js";
import { createCursorCodec } from "../../core/paging.js";
import { partnerTokenClaims } from "../../core/partners/token-claims.js";

describe("form parsing", () => {
  it("decodes '+' and percent escapes and reports duplicates", () => {
    const r = parseForm("a=b+c&d=%2F%20&a=x&flag");
    expect(r.ok).to.equal(true);
    if (!r.ok) return;
    expect(r.params.get("a")).to.equal("b c");
    expect(r.params.get("d")).to.equal("/ ");
    expect(r.params.get("flag")).to.equal("");
    expect(r.duplicates).to.deep.equal(["a"]);
  });
  it("rejects malformed escapes", () => {
    expect(parseForm("a=%zz").ok).to.equal(false);
    expect(parseForm("a=%E0%A4%A").ok).to.equal(false);
  });
});

describe("token scopes", () => {
  const ent = ["kyc:read", "wallet:read"];
  it("omitted or sent without a value means every entitlement", () => {
    expect(resolveTokenScopes(undefined, ent)).to.deep.equal({ ok: true, scopes: ent });
    expect(resolveTokenScopes("", ent)).to.deep.equal({ ok: true, scopes: ent });
  });
  it("a subset is granted, duplicates folded", () => {
    expect(resolveTokenScopes("wallet:read wallet:read", ent)).to.deep.equal({ ok: true, scopes: ["wallet:read"] });
  });
  it("anything else is refused", () => {
    expect(resolveTokenScopes("treasury:write", ent).ok).to.equal(false);
    expect(resolveTokenScopes("kyc:read  wallet:read", ent).ok).to.equal(false);
    for (const blank of [" ", "  ", "\t"]) expect(resolveTokenScopes(blank, ent).ok, JSON.stringify(blank)).to.equal(false);
    expect(resolveTokenScopes('kyc:read a"b', [...ent, 'a"b']).ok).to.equal(false);
  });
});

describe("partner credentials", () => {
  it("have the documented shapes", () => {
    expect(generateClientId("acme")).to.match(/^gpc_acme_[0-9a-f]{8}$/);
    expect(generateClientSecret()).to.match(/^gps_[A-Za-z0-9_-]{43}$/);
    expect(slugFromName("  Acme Payments, Inc. ")).to.equal("acme-payments-inc");
    expect(slugFromName("!!!")).to.equal(undefined);
    expect(slugFromName("Ünïcødé Straße")).to.equal("unicode-strasse");
    expect(slugFromName("Łódź Œuvre Ærø")).to.equal("lodz-oeuvre-aero");
    expect(slugFromName("株式会社")).to.equal(undefined);
  });
  it("hash with salted scrypt and verify only the right secret", async () => {
    const hasher = await createSecretHasher({ params: { N: 1024, r: 8, p: 1 } });
    const a = await hasher.hash("s3cret");
    const b = await hasher.hash("s3cret");
    expect(a).to.match(/^scrypt\$1024\$8\$1\$/);
    expect(a).to.not.equal(b);
    expect(await hasher.verify("s3cret", a)).to.equal(true);
    expect(await hasher.verify("s3cret!", a)).to.equal(false);
    expect(await hasher.verify("s3cret", "not-a-hash")).to.equal(false);
  });
  it("compare in constant time regardless of length", () => {
    expect(constantTimeEqual("abc", "abc")).to.equal(true);
    expect(constantTimeEqual("abc", "abcd")).to.equal(false);
  });
});

describe("cursor codec", () => {
  it("round-trips and refuses anything it did not sign", () => {
    const codec = createCursorCodec(Buffer.alloc(32, 1));
    const other = createCursorCodec(Buffer.alloc(32, 2));
    const c = codec.encode({ a: 42 });
    expect(codec.decode(c)).to.deep.equal({ a: 42 });
    expect(other.decode(c)).to.equal(undefined);
    expect(codec.decode(`${c}x`)).to.equal(undefined);
    expect(codec.decode("")).to.equal(undefined);
  });
});

describe("partner token claims", () => {
  it("are exactly the documented set", () => {
    const now = new Date("2026-01-01T00:00:00.900Z");
    const claims = partnerTokenClaims({ issuer: "https://i", audience: "urn:a", clientId: "gpc_a_00000000", scopes: [], now });
    expect(claims).to.include({
      iss: "https://i",
      aud: "urn:a",
      sub: "gpc_a_00000000",
      client_id: "gpc_a_00000000",
      scope: "",
      iat: 1767225600,
      nbf: 1767225600,
      exp: 1767229200,
    });
    expect(Object.keys(claims)).to.have.length(9);
  });
});
