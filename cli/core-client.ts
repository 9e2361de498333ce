import { createGrpcTransport } from "@connectrpc/connect-node";
import { Code, ConnectError, type Interceptor } from "@connectrpc/connect";
import { ErrorDetailSchema, Reason } from "../gen/vaultgate/common/v1/errors_pb.js";
import { createCoreClients, type CoreClients } from "../gateways/core-clients.js";
import { readAdminToken } from "./admin-token.js";
import { ConfigError, type Config } from "./config.js";
import { loadCoreDial } from "./core-tls.js";

export interface AdminConnection {
  clients: CoreClients;
  coreUrl: string;
  /** Where coreUrl came from, for messages: "CORE_URL" or CORE_HOST and CORE_PORT. */
  coreUrlFrom: string;
  /** Where the operator credential came from, for messages. */
  tokenFrom: string;
}

/**
 * Admin clients for the operator CLI: gRPC to the running core, over TLS for an https://
 * CORE_URL (trusting CORE_TLS_CA, presenting CORE_TLS_CLIENT_CERT when set).
 */
export async function connectAdmin(config: Config): Promise<AdminConnection> {
  const coreUrl = config.coreUrl ?? defaultCoreUrl(config);
  const coreUrlFrom = config.coreUrl ? "CORE_URL" : "CORE_HOST and CORE_PORT; CORE_URL is unset";
  const dial = loadCoreDial(config, coreUrl, config.coreUrl ? undefined : coreUrlFrom);
  const token = await readAdminToken(config.dataDir, config.adminToken);
  if (!token) {
    throw new Error(
      `no operator credential: ADMIN_TOKEN is unset and ${config.dataDir}/admin-token does not exist (DATA_DIR=${config.dataDir}). ` +
        "Run this with the DATA_DIR the service uses, or set ADMIN_TOKEN to the server's ADMIN_TOKEN.",
    );
  }
  const tokenFrom = config.adminToken ? "ADMIN_TOKEN" : `${config.dataDir}/admin-token (DATA_DIR=${config.dataDir}; ADMIN_TOKEN is unset)`;
  // Such a value cannot go in a header, and the header code's error would quote it whole.
  if (/[^\x20-\x7e]/.test(token)) {
    throw new Error(
      `the operator credential from ${tokenFrom} has a line break, control or non-ASCII character: ` +
        "it must be the server's ADMIN_TOKEN, printable ASCII without spaces",
    );
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
  return { clients: createCoreClients(transport), coreUrl, coreUrlFrom, tokenFrom };
}

/** An RPC failure as one line that says what to do: `message (reason)` plus a hint. */
export function describeRpcError(err: unknown, conn: Pick<AdminConnection, "coreUrl" | "coreUrlFrom" | "tokenFrom">): Error {
  if (!(err instanceof ConnectError)) return err instanceof Error ? err : new Error(String(err));
  const detail = err.findDetails(ErrorDetailSchema)[0];
  if (
    !detail &&
    (err.code === Code.Unavailable || err.code === Code.Unknown || err.code === Code.Internal) &&
    /ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|connect/i.test(err.message)
  ) {
    return new Error(
      `cannot reach core at ${conn.coreUrl} (from ${conn.coreUrlFrom}): is 'vaultgate serve' running? ` +
        "Set CORE_URL to where core listens, or CORE_PORT if it runs on this host.",
    );
  }
  if (!detail && (err.cause as { code?: unknown } | undefined)?.code === "ERR_HTTP2_ERROR") {
    return new Error(
      `${conn.coreUrl} (from ${conn.coreUrlFrom}) did not answer as core (gRPC over HTTP/2): is that the gateway's PORT rather than CORE_PORT, or another service?`,
    );
  }
  const reason = detail ? Reason[detail.reason].toLowerCase() : Code[err.code];
  if (detail?.reason === Reason.ADMIN_UNAUTHENTICATED) {
    return new Error(
      `${err.rawMessage} (${reason}): core at ${conn.coreUrl} refused the operator credential from ${conn.tokenFrom}. ` +
        "ADMIN_TOKEN must match the server's ADMIN_TOKEN (or use the DATA_DIR the server writes its admin-token into).",
    );
  }
  return new Error(`${err.rawMessage} (${reason})`);
}

/** The core of this host: CORE_HOST (loopback for a wildcard bind) and CORE_PORT, https when it serves TLS. */
function defaultCoreUrl(config: Config): string {
  if (config.corePort === 0) {
    throw new ConfigError(
      "CORE_PORT=0 cannot be dialled: 0 lets a listening core pick any free port. Set CORE_PORT to the port core listens on, or CORE_URL to its address",
    );
  }
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
  // A cleartext core answers the TLS hello with HTTP/2 bytes, which OpenSSL reports as a bad record.
  if (/WRONG_VERSION_NUMBER|wrong version number|PACKET_LENGTH_TOO_LONG|packet length too long/i.test(text)) {
    return new ConnectError(
      `core at ${coreUrl} does not speak TLS: dial it with http:// (CORE_URL), or give core CORE_TLS_CERT and CORE_TLS_KEY`,
      Code.Unavailable,
    );
  }
  if (/CERTIFICATE_REQUIRED|certificate required/i.test(text)) {
    return new ConnectError(`core at ${coreUrl} requires a client certificate: set CORE_TLS_CLIENT_CERT and CORE_TLS_CLIENT_KEY`, Code.Unauthenticated);
  }
  if (/UNKNOWN_CA|unknown ca|BAD_CERTIFICATE|bad certificate/i.test(text)) {
    return new ConnectError(
      `core at ${coreUrl} refused the certificate in CORE_TLS_CLIENT_CERT: it must be signed by the CA core trusts`,
      Code.Unauthenticated,
    );
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
