import { createGrpcTransport } from "@connectrpc/connect-node";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { createCoreClients, type CoreClients } from "../gateways/core-clients.js";
import { readAdminToken } from "./admin-token.js";
import { loadCoreDial, type Config } from "./config.js";

/**
 * Admin clients for the operator CLI: gRPC to the running core, over TLS for an https://
 * CORE_URL (trusting CORE_TLS_CA, presenting CORE_TLS_CLIENT_CERT when set).
 */
export async function connectAdmin(config: Config): Promise<{ clients: CoreClients; coreUrl: string }> {
  const coreUrl = config.coreUrl ?? defaultCoreUrl(config);
  const dial = loadCoreDial(config, coreUrl);
  const token = await readAdminToken(config.dataDir, config.adminToken);
  if (!token) {
    throw new Error(`no operator credential: set ADMIN_TOKEN or start the service once so it writes ${config.dataDir}/admin-token`);
  }
  const auth: Interceptor = (next) => (req) => {
    req.header.set("authorization", `Bearer ${token}`);
    return next(req);
  };
  const hints: Interceptor = (next) => async (req) => {
    try {
      return await next(req);
    } catch (err) {
      throw explainTlsFailure(err, coreUrl, !!dial.nodeOptions.cert) ?? err;
    }
  };
  const transport = createGrpcTransport({ baseUrl: dial.baseUrl, nodeOptions: dial.nodeOptions, interceptors: [hints, auth] });
  return { clients: createCoreClients(transport), coreUrl };
}

/** The core of this host: CORE_HOST (loopback for a wildcard bind) and CORE_PORT, https when it serves TLS. */
function defaultCoreUrl(config: Config): string {
  const host = config.coreHost === "0.0.0.0" || config.coreHost === "::" ? "127.0.0.1" : config.coreHost;
  const scheme = config.coreTls.certFile ? "https" : "http";
  return `${scheme}://${host.includes(":") ? `[${host}]` : host}:${config.corePort}`;
}

/**
 * Handshake failures surface as bare OpenSSL text; say which setting to look at instead.
 * (Worded without "connect" so the CLI does not report them as an unreachable core.)
 */
function explainTlsFailure(err: unknown, coreUrl: string, presentedCert: boolean): ConnectError | undefined {
  if (!(err instanceof ConnectError) || !coreUrl.startsWith("https:") || err.details.length > 0) return undefined;
  const cause = err.cause as { code?: unknown } | undefined;
  const text = `${typeof cause?.code === "string" ? cause.code : ""} ${err.message}`;
  if (/CERTIFICATE_REQUIRED|certificate required/i.test(text)) {
    return new ConnectError(`core at ${coreUrl} requires a client certificate: set CORE_TLS_CLIENT_CERT and CORE_TLS_CLIENT_KEY`, Code.Unauthenticated);
  }
  if (/UNKNOWN_CA|unknown ca|BAD_CERTIFICATE|bad certificate/i.test(text)) {
    return new ConnectError(`core at ${coreUrl} refused the certificate in CORE_TLS_CLIENT_CERT: it must be signed by the CA core trusts`, Code.Unauthenticated);
  }
  // Under TLS 1.3 core refuses a client certificate after the client's handshake ends: the
  // client only sees the session drop (reset or cancel, depending on timing).
  if (err.code === Code.Canceled || err.code === Code.Aborted || /ECONNRESET/.test(text)) {
    const hint = presentedCert
      ? "did it refuse the certificate in CORE_TLS_CLIENT_CERT? It must be signed by the CA core trusts"
      : "if core requires client certificates, set CORE_TLS_CLIENT_CERT and CORE_TLS_CLIENT_KEY";
    return new ConnectError(`core at ${coreUrl} dropped the TLS session: ${hint} (${err.rawMessage})`, Code.Unavailable);
  }
  if (/SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER|CERT_HAS_EXPIRED|CERT_NOT_YET_VALID|ALTNAME|self-signed|certificate/i.test(text)) {
    return new ConnectError(
      `core's certificate at ${coreUrl} did not verify (${err.rawMessage}): set CORE_TLS_CA to the CA that signed it, and a CORE_URL host the certificate names`,
      Code.Unavailable,
    );
  }
  return undefined;
}
