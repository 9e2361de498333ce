import type http from "node:http";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { fail } from "../errors.js";
import { jsonTextProblem } from "../../lib/text.js";
import { checkClientMetadata } from "./client-metadata.js";
import type { ClientRecord } from "./stores/clients.js";
import { pinnedRequest, urlHost } from "../net/pinned-request.js";
import { isPublicAddress } from "../net/public-address.js";
import { createHostResolver, HostLookupError, type HostResolver } from "../net/resolver.js";

/**
 * Client ID Metadata Documents: core fetches from an address any caller chooses, so the fetch is
 * fenced (form, public resolved addresses pinned for the connect, no redirects, size and time).
 * docs/reference/agent-oauth.md ("Client ID Metadata Documents") has the rules and the cache.
 */

export const CLIENT_ID_URL_MAX = 512;
export const DOCUMENT_MAX_BYTES = 5 * 1024;
export const FETCH_TIMEOUT_MS = 3000;
export const CACHE_DEFAULT_S = 300;
export const CACHE_MIN_S = 60;
export const CACHE_MAX_S = 24 * 3600;
const CACHE_MAX_ENTRIES = 1000;
/** Fetches in flight at once (per process); more wait for nothing: they are refused as overload. */
const MAX_CONCURRENT_FETCHES = 32;
/** Of those, what one client address may hold, so a caller naming slow documents starves only itself. */
export const MAX_FETCHES_PER_CALLER = 4;
const LOOPBACK_HOSTS = new Set(["127.0.0.1", "[::1]", "localhost"]);

/** True when `clientId` is meant as a metadata document URL (any case of the scheme); everything else is a registered client id. */
export function isClientIdUrl(clientId: string): boolean {
  return /^https?:\/\//i.test(clientId);
}

export interface ClientIdMetadataOptions {
  clock: () => Date;
  /**
   * Development only (CLIENT_METADATA_ALLOW_PRIVATE): documents on private, loopback and
   * link-local addresses are fetched, and `http://` client ids on loopback hosts are accepted.
   */
  allowPrivate: boolean;
  /** Test seam: the CA that https document servers chain to (default: Node's roots). */
  ca?: string;
  timeoutMs?: number;
  /** Resolves document hosts off the thread pool, bounded (core/net/resolver.ts); default the system's name servers. */
  resolver?: HostResolver;
}

export interface ClientIdMetadataResolver {
  /**
   * The client a metadata document URL names, fetched or cached; INVALID_CLIENT with the reason when it
   * cannot be used. `caller` (the client address a gateway vouched for) gets its own share of the fetches.
   */
  resolve(clientId: string, caller?: string): Promise<ClientRecord>;
}

class DocumentProblem extends Error {}
const problem = (message: string): never => {
  throw new DocumentProblem(message);
};

interface Cached {
  client: ClientRecord;
  until: number;
}

export function createClientIdMetadataResolver(options: ClientIdMetadataOptions): ClientIdMetadataResolver {
  const cache = new Map<string, Cached>();
  const inflight = new Map<string, Promise<Cached>>();
  let fetching = 0;
  const fetchingFor = new Map<string, number>();
  const timeoutMs = options.timeoutMs ?? FETCH_TIMEOUT_MS;
  const resolver = options.resolver ?? createHostResolver();

  async function load(url: URL, clientId: string): Promise<Cached> {
    const doc = await fetchDocument(url, { allowPrivate: options.allowPrivate, ca: options.ca, timeoutMs, resolver });
    const client = documentClient(clientId, doc.body, options.clock());
    return { client, until: options.clock().getTime() + cacheSeconds(doc.cacheControl) * 1000 };
  }

  return {
    async resolve(clientId, caller = "") {
      const url = checkClientIdUrl(clientId, options.allowPrivate);
      const now = options.clock().getTime();
      const hit = cache.get(clientId);
      if (hit && hit.until > now) return hit.client;
      let pending = inflight.get(clientId);
      if (!pending) {
        const mine = fetchingFor.get(caller) ?? 0;
        if (fetching >= MAX_CONCURRENT_FETCHES || (caller !== "" && mine >= MAX_FETCHES_PER_CALLER))
          fail(Reason.OVERLOADED, "too many client metadata documents are being fetched; retry shortly", { retryAfterSeconds: 1 });
        fetching++;
        fetchingFor.set(caller, mine + 1);
        pending = load(url, clientId).finally(() => {
          fetching--;
          const left = (fetchingFor.get(caller) ?? 1) - 1;
          if (left > 0) fetchingFor.set(caller, left);
          else fetchingFor.delete(caller);
          inflight.delete(clientId);
        });
        inflight.set(clientId, pending);
      }
      let entry: Cached;
      try {
        entry = await pending;
      } catch (err) {
        // Too many lookups in flight: refused at once, like too many fetches.
        if (err instanceof HostLookupError && err.kind === "busy")
          fail(Reason.OVERLOADED, "too many client metadata documents are being fetched; retry shortly", { retryAfterSeconds: 1 }, err);
        const why = err instanceof DocumentProblem ? err.message : "the document could not be fetched";
        return fail(Reason.INVALID_CLIENT, `client_id metadata document: ${why}`, {}, err);
      }
      cache.delete(clientId);
      if (cache.size >= CACHE_MAX_ENTRIES) cache.delete(cache.keys().next().value!);
      cache.set(clientId, entry);
      return entry.client;
    },
  };
}

/** The URL rules of the draft (section 3) plus ours: canonical form, so one document is one client. */
export function checkClientIdUrl(clientId: string, allowPrivate: boolean): URL {
  const refuse = (why: string): never => fail(Reason.INVALID_CLIENT, `client_id URL ${why}`);
  if (clientId.length > CLIENT_ID_URL_MAX) refuse(`is longer than ${CLIENT_ID_URL_MAX} characters`);
  let url: URL;
  try {
    url = new URL(clientId);
  } catch {
    return refuse("is not a valid URL");
  }
  if (url.protocol === "http:") {
    if (!allowPrivate) refuse("must use https");
    if (!LOOPBACK_HOSTS.has(url.hostname)) refuse("must use https (http only on loopback, in development)");
  } else if (url.protocol !== "https:") refuse("must use https");
  if (clientId.includes("#")) refuse("must not have a fragment");
  if (url.username || url.password || /^[a-z]+:\/\/[^/]*@/i.test(clientId)) refuse("must not carry credentials");
  const rawPath = clientId.replace(/^[a-z]+:\/\/[^/?]*/i, "").split("?")[0]!;
  if (rawPath.split("/").some((seg) => /^(\.|%2e){1,2}$/i.test(seg))) refuse("must not have . or .. path segments");
  if (url.pathname === "/" || url.pathname === "") refuse("must have a path");
  if (url.href !== clientId) refuse(`must be in canonical form (${url.href})`);
  return url;
}

/** Cache lifetime from Cache-Control: max-age within [CACHE_MIN_S, CACHE_MAX_S]; no-store/no-cache count as the minimum. */
export function cacheSeconds(header: string | undefined): number {
  if (!header) return CACHE_DEFAULT_S;
  const directives = header
    .toLowerCase()
    .split(",")
    .map((d) => d.trim());
  if (directives.some((d) => d === "no-store" || d === "no-cache")) return CACHE_MIN_S;
  const maxAge = directives.map((d) => /^max-age\s*=\s*"?(\d+)"?$/.exec(d)).find(Boolean);
  if (!maxAge) return CACHE_DEFAULT_S;
  return Math.min(CACHE_MAX_S, Math.max(CACHE_MIN_S, Number(maxAge[1])));
}

interface Fetched {
  body: Buffer;
  cacheControl: string | undefined;
}

/**
 * GET the document: resolve the host ourselves, refuse private addresses (unless allowed),
 * connect to the address we checked, no redirects, at most DOCUMENT_MAX_BYTES, all within
 * the time limit.
 */
async function fetchDocument(url: URL, opts: { allowPrivate: boolean; ca?: string; timeoutMs: number; resolver: HostResolver }): Promise<Fetched> {
  let timer: NodeJS.Timeout | undefined;
  let request: http.ClientRequest | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      request?.destroy();
      reject(new DocumentProblem(`no answer within ${opts.timeoutMs / 1000} s`));
    }, opts.timeoutMs);
  });
  try {
    return await Promise.race([expired, get()]);
  } finally {
    clearTimeout(timer);
  }

  async function get(): Promise<Fetched> {
    let addresses: { address: string; family: 4 | 6 }[];
    try {
      addresses = await opts.resolver.resolve(urlHost(url));
    } catch (err) {
      if (err instanceof HostLookupError && err.kind === "busy") throw err;
      if (err instanceof HostLookupError && err.kind === "timeout") return problem(`its host name did not resolve in time (${err.message})`);
      return problem("its host name does not resolve");
    }
    if (addresses.length === 0) problem("its host name does not resolve");
    if (!opts.allowPrivate && addresses.some((a) => !isPublicAddress(a.address))) {
      problem("its host is a private, loopback, link-local or otherwise non-public address");
    }
    return new Promise<Fetched>((resolve, reject) => {
      // Every connection goes to the address checked above, whatever DNS answers next.
      const req = pinnedRequest(url, addresses[0]!, {
        method: "GET",
        headers: { accept: "application/json", "accept-encoding": "identity", "user-agent": "Vaultgate (client metadata)" },
        ca: opts.ca,
      });
      request = req;
      req.on("error", (err) => reject(err instanceof DocumentProblem ? err : new DocumentProblem("the document could not be fetched")));
      req.on("response", (res) => {
        const status = res.statusCode ?? 0;
        const stop = (why: string) => {
          res.resume();
          req.destroy();
          reject(new DocumentProblem(why));
        };
        if (status >= 300 && status < 400) return stop(`answered with a redirect (HTTP ${status}); redirects are not followed`);
        if (status !== 200) return stop(`answered HTTP ${status}`);
        const encoding = res.headers["content-encoding"];
        if (encoding && encoding.toLowerCase() !== "identity") return stop("must not be compressed");
        if (Number(res.headers["content-length"] ?? 0) > DOCUMENT_MAX_BYTES) return stop(`is larger than ${DOCUMENT_MAX_BYTES} bytes`);
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > DOCUMENT_MAX_BYTES) return stop(`is larger than ${DOCUMENT_MAX_BYTES} bytes`);
          chunks.push(chunk);
        });
        res.on("end", () => resolve({ body: Buffer.concat(chunks), cacheControl: header(res.headers["cache-control"]) }));
        res.on("error", () => reject(new DocumentProblem("the document could not be read")));
      });
      req.end();
    });
  }
}

function header(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v.join(", ") : v;
}

/** The document, checked: JSON object, client_id equal to the URL, public client, our metadata rules. */
function documentClient(clientId: string, body: Buffer, now: Date): ClientRecord {
  let text: string;
  let doc: unknown;
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(body);
    doc = JSON.parse(text);
  } catch {
    return problem("is not JSON");
  }
  if (typeof doc !== "object" || doc === null || Array.isArray(doc)) problem("must be a JSON object");
  const bad = jsonTextProblem(doc);
  if (bad) problem(bad);
  const d = doc as Record<string, unknown>;
  if (d.client_id !== clientId) problem("its client_id must equal the URL it is served from");
  if ("client_secret" in d || "client_secret_expires_at" in d) problem("must not contain a client_secret");
  const method = str(d, "token_endpoint_auth_method");
  if (method === "private_key_jwt") problem("token_endpoint_auth_method private_key_jwt is not supported here; use none (a public client with PKCE)");
  if (method && method !== "none") problem("token_endpoint_auth_method must be none");
  const fields = {
    clientName: str(d, "client_name"),
    redirectUris: strings(d, "redirect_uris"),
    grantTypes: strings(d, "grant_types"),
    responseTypes: strings(d, "response_types"),
    tokenEndpointAuthMethod: "none",
    scope: str(d, "scope"),
  };
  // An absent scope means the default; one that is there but empty would arrive looking absent.
  if (d.scope === "") problem("scope names no scope: leave it out for the default, or name scopes");
  let meta: ReturnType<typeof checkClientMetadata>;
  try {
    meta = checkClientMetadata(fields, { authMethods: ["none"], defaultAuthMethod: "none", unknownScopes: "ignore", reason: Reason.INVALID_CLIENT });
  } catch (err) {
    return problem((err as Error & { rawMessage?: string }).rawMessage ?? "is not valid client metadata");
  }
  if (meta.redirectUris.length === 0) problem("redirect_uris must list at least one URI");
  return { ...meta, clientId, secretHash: null, createdAt: now, metadataDocument: true };
}

function str(d: Record<string, unknown>, name: string): string {
  const v = d[name];
  if (v === undefined || v === null) return "";
  if (typeof v !== "string") return problem(`${name} must be a string`);
  return v;
}

function strings(d: Record<string, unknown>, name: string): string[] {
  const v = d[name];
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v) || v.some((x) => typeof x !== "string")) return problem(`${name} must be an array of strings`);
  return v as string[];
}
