import { createPrivateKey, X509Certificate, type KeyObject } from "node:crypto";
import { readFileSync } from "node:fs";
import { ConfigError, isLoopbackHost, type Config } from "./config.js";

/** Key material core serves with: PEM strings, checked. */
export interface CoreServerTls {
  cert: string;
  key: string;
  /** When set, core requires a client certificate signed by one of these CAs. */
  ca?: string;
}

/**
 * Reads and checks the core port's TLS files (undefined = cleartext), and refuses
 * cleartext on a non-loopback CORE_HOST unless CORE_ALLOW_CLEARTEXT=true. Called by
 * `serve` before core starts; every failure names its variable and never shows key bytes.
 */
export function loadCoreServerTls(config: Config): CoreServerTls | undefined {
  const { certFile, keyFile, caFile } = config.coreTls;
  // On a dialling process CORE_TLS_CA alone is a trust anchor; on core it means mTLS, which needs TLS.
  if (caFile && !certFile)
    throw new ConfigError("CORE_TLS_CA needs CORE_TLS_CERT and CORE_TLS_KEY on a process that serves core (client certificates need TLS)");
  if (!certFile || !keyFile) {
    if (!isLoopbackHost(config.coreHost) && !config.coreAllowCleartext) {
      throw new ConfigError(
        `CORE_HOST=${config.coreHost} is not a loopback address: core would serve gRPC without TLS on the network. ` +
          "Set CORE_TLS_CERT and CORE_TLS_KEY (and CORE_TLS_CA to require client certificates), " +
          "bind CORE_HOST=127.0.0.1, or set CORE_ALLOW_CLEARTEXT=true if the network path is protected otherwise",
      );
    }
    return undefined;
  }
  const cert = readPem("CORE_TLS_CERT", certFile);
  const key = readPem("CORE_TLS_KEY", keyFile);
  const x509 = certificate("CORE_TLS_CERT", cert);
  const privateKey = privateKeyOf("CORE_TLS_KEY", key);
  if (!x509.checkPrivateKey(privateKey)) throw new ConfigError("CORE_TLS_KEY is not the private key of the certificate in CORE_TLS_CERT");
  const tls: CoreServerTls = { cert, key };
  if (caFile) tls.ca = caBundle("CORE_TLS_CA", readPem("CORE_TLS_CA", caFile));
  return tls;
}

/** What a gateway or the CLI needs to dial core: its URL and the TLS options for http2.connect. */
export interface CoreDial {
  baseUrl: string;
  nodeOptions: { ca?: string; cert?: string; key?: string };
}

/**
 * How gateways and the CLI reach core. Cleartext `http://` must name a loopback host unless
 * CORE_ALLOW_CLEARTEXT=true: operator and gateway credentials would cross the network in clear.
 */
export function loadCoreDial(config: Config, baseUrl: string, from?: string): CoreDial {
  const url = new URL(baseUrl);
  const { certFile, keyFile } = config.coreClientTls;
  if (url.protocol === "http:") {
    // A trust anchor set but never used would look like protection that is not there.
    if (config.coreTls.caFile) {
      const named = from ? `${url.origin} (${from})` : `CORE_URL=${url.origin}`;
      throw new ConfigError(`CORE_TLS_CA is set but ${named} is not https://: the CA only applies to TLS; dial core with https:// or unset CORE_TLS_CA`);
    }
    if (!isLoopbackHost(url.hostname) && !config.coreAllowCleartext) {
      throw new ConfigError(
        `CORE_URL=${url.origin} is cleartext to a non-loopback host: use an https:// CORE_URL (core with CORE_TLS_CERT/CORE_TLS_KEY), ` +
          "or set CORE_ALLOW_CLEARTEXT=true if the network path is protected otherwise",
      );
    }
    if (certFile) throw new ConfigError(`CORE_TLS_CLIENT_CERT is set but CORE_URL=${url.origin} is not https://`);
    return { baseUrl, nodeOptions: {} };
  }
  const nodeOptions: CoreDial["nodeOptions"] = {};
  if (config.coreTls.caFile) nodeOptions.ca = caBundle("CORE_TLS_CA", readPem("CORE_TLS_CA", config.coreTls.caFile));
  if (certFile && keyFile) {
    nodeOptions.cert = readPem("CORE_TLS_CLIENT_CERT", certFile);
    nodeOptions.key = readPem("CORE_TLS_CLIENT_KEY", keyFile);
    const x509 = certificate("CORE_TLS_CLIENT_CERT", nodeOptions.cert);
    if (!x509.checkPrivateKey(privateKeyOf("CORE_TLS_CLIENT_KEY", nodeOptions.key))) {
      throw new ConfigError("CORE_TLS_CLIENT_KEY is not the private key of the certificate in CORE_TLS_CLIENT_CERT");
    }
  }
  return { baseUrl, nodeOptions };
}

function readPem(name: string, file: string): string {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? "error";
    throw new ConfigError(`${name}: cannot read ${file} (${code})`);
  }
  if (!text.includes("-----BEGIN ")) throw new ConfigError(`${name}: ${file} is not a PEM file`);
  return text;
}

function certificate(name: string, pem: string): X509Certificate {
  try {
    return new X509Certificate(pem);
  } catch {
    throw new ConfigError(`${name} must hold a PEM X.509 certificate`);
  }
}

function privateKeyOf(name: string, pem: string): KeyObject {
  try {
    return createPrivateKey(pem);
  } catch {
    // The parser's message may quote the input; say only what is wrong.
    throw new ConfigError(`${name} must hold an unencrypted PEM private key`);
  }
}

/** A CA file may hold several certificates; each must parse. */
function caBundle(name: string, pem: string): string {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) throw new ConfigError(`${name} must hold one or more PEM CA certificates`);
  for (const block of blocks) certificate(name, block);
  return pem;
}
