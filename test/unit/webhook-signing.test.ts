import { expect } from "chai";
import { Webhook } from "standardwebhooks";
import { backoffMs } from "../../core/partners/webhooks/worker.js";
import { createSecretBox, generateWebhookSecret, parseWebhookSecret, signWebhook } from "../../core/partners/webhooks/signing.js";

describe("webhook signing and backoff (pure)", () => {
  it("signs exactly as Standard Webhooks verifies", () => {
    const secret = generateWebhookSecret();
    const now = Math.floor(Date.now() / 1000);
    const body = JSON.stringify({ type: "kyc.status_changed", timestamp: new Date().toISOString(), data: { a: 1 } });
    const headers = signWebhook(secret, "msg_1", now, body);
    expect(new Webhook(secret).verify(body, headers)).to.deep.equal(JSON.parse(body));
    expect(() => new Webhook(secret).verify(`${body} `, headers)).to.throw();
  });

  it("accepts only whsec_ secrets of 24 to 64 bytes", () => {
    expect(parseWebhookSecret(`whsec_${Buffer.alloc(32).toString("base64")}`)).to.have.length(32);
    expect(parseWebhookSecret(`whsec_${Buffer.alloc(8).toString("base64")}`)).to.equal(undefined);
    expect(parseWebhookSecret("secret")).to.equal(undefined);
  });

  it("seals secrets so they round-trip and are tamper-evident", () => {
    const box = createSecretBox(Buffer.alloc(32, 1));
    const sealed = box.seal("whsec_abc");
    expect(box.open(sealed)).to.equal("whsec_abc");
    // Flip a bit of the bytes, not of the text: base64url's last character carries unused bits.
    const raw = Buffer.from(sealed, "base64url");
    for (const at of [0, 12, 28, raw.length - 1]) {
      const tampered = Buffer.from(raw);
      tampered[at]! ^= 1;
      expect(() => box.open(tampered.toString("base64url")), `byte ${at}`).to.throw();
    }
  });

  it("backs off exponentially up to the cap", () => {
    expect([1, 2, 3, 4].map((n) => backoffMs(n, 30_000, 100_000))).to.deep.equal([30_000, 60_000, 100_000, 100_000]);
  });
});
