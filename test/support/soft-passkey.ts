import { createHash, createPublicKey, randomBytes, sign, type KeyObject } from "node:crypto";
import { newP256PrivateKey } from "../../lib/crypto.js";

/** Minimal CBOR (unsigned/negative ints, byte and text strings, maps): what "none" attestation needs. */
function cbor(v: unknown): Buffer {
  const head = (major: number, n: number) => {
    if (n < 24) return Buffer.from([(major << 5) | n]);
    if (n < 256) return Buffer.from([(major << 5) | 24, n]);
    const b = Buffer.alloc(3);
    b[0] = (major << 5) | 25;
    b.writeUInt16BE(n, 1);
    return b;
  };
  if (typeof v === "number") return v >= 0 ? head(0, v) : head(1, -1 - v);
  if (Buffer.isBuffer(v)) return Buffer.concat([head(2, v.length), v]);
  if (typeof v === "string") return Buffer.concat([head(3, Buffer.byteLength(v)), Buffer.from(v)]);
  if (v instanceof Map) return Buffer.concat([head(5, v.size), ...[...v].flatMap(([k, x]) => [cbor(k), cbor(x)])]);
  throw new Error("unsupported CBOR value");
}

const b64u = (b: Buffer) => b.toString("base64url");
const sha = (b: Buffer | string) => createHash("sha256").update(b).digest();
const UP_UV = 0x01 | 0x04;

/**
 * A software passkey authenticator (ES256, "none" attestation, user verified) for tests
 * that drive the passkey RPCs without a browser: it answers exactly what it is asked,
 * so a test can also make it answer for another origin or challenge.
 */
export function softPasskey() {
  const privateKey = newP256PrivateKey();
  const publicKey = createPublicKey(privateKey);
  const credId = randomBytes(16);
  let counter = 0;
  const jwk = publicKey.export({ format: "jwk" });
  const cose = cbor(
    new Map<number, unknown>([
      [1, 2],
      [3, -7],
      [-1, 1],
      [-2, Buffer.from(jwk.x!, "base64url")],
      [-3, Buffer.from(jwk.y!, "base64url")],
    ]),
  );
  const clientData = (type: string, challenge: string, origin: string) => Buffer.from(JSON.stringify({ type, challenge, origin, crossOrigin: false }));
  const counterBytes = () => {
    const b = Buffer.alloc(4);
    b.writeUInt32BE(++counter);
    return b;
  };
  return {
    id: b64u(credId),
    /** A RegistrationResponseJSON for creation options (as JSON) at `origin`. */
    create(optionsJson: string, origin: string) {
      const o = JSON.parse(optionsJson) as { challenge: string; rp: { id: string } };
      const idLen = Buffer.alloc(2);
      idLen.writeUInt16BE(credId.length);
      const authData = Buffer.concat([sha(o.rp.id), Buffer.from([UP_UV | 0x40]), counterBytes(), Buffer.alloc(16), idLen, credId, cose]);
      const attestationObject = cbor(
        new Map<string, unknown>([
          ["fmt", "none"],
          ["attStmt", new Map()],
          ["authData", authData],
        ]),
      );
      return JSON.stringify({
        id: b64u(credId),
        rawId: b64u(credId),
        type: "public-key",
        clientExtensionResults: {},
        response: {
          clientDataJSON: b64u(clientData("webauthn.create", o.challenge, origin)),
          attestationObject: b64u(attestationObject),
          transports: ["internal"],
        },
      });
    },
    /** An AuthenticationResponseJSON for request options (as JSON) at `origin`. */
    get(optionsJson: string, origin: string, key: KeyObject = privateKey) {
      const o = JSON.parse(optionsJson) as { challenge: string; rpId: string };
      const authData = Buffer.concat([sha(o.rpId), Buffer.from([UP_UV]), counterBytes()]);
      const cd = clientData("webauthn.get", o.challenge, origin);
      const signature = sign("sha256", Buffer.concat([authData, sha(cd)]), key);
      return JSON.stringify({
        id: b64u(credId),
        rawId: b64u(credId),
        type: "public-key",
        clientExtensionResults: {},
        response: { clientDataJSON: b64u(cd), authenticatorData: b64u(authData), signature: b64u(signature) },
      });
    },
  };
}

export type SoftPasskey = ReturnType<typeof softPasskey>;

/** The ceremony options a passkey page carries in its `data-options` attribute, unescaped. */
export function passkeyOptionsOf(page: string): string {
  return /data-options="([^"]*)"/
    .exec(page)![1]!
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&lt;/g, "<")
    .replace(/&gt;/g, ">")
    .replace(/&amp;/g, "&");
}
