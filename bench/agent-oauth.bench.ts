/**
 * Code exchange and refresh next to node-oidc-provider doing the same durable work, and
 * revocation-to-refusal latency; targets and method in docs/benchmarks.md. Each server and
 * the load generator run in processes of their own so none is measured while another runs.
 */
import { createHash, randomBytes } from "node:crypto";
import { performance } from "node:perf_hooks";
import { Code, ConnectError } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { CODE_TTL_MS } from "../core/grants/service.js";
import { createCoreClients, type CoreClients } from "../gateways/core-clients.js";
import { tempDataDir } from "../test/support/process.js";
import {
  alternateAtLevels,
  benchDatabase,
  fmt,
  load,
  median,
  percentile,
  QUICK,
  roundRatios,
  seconds,
  startBenchChild,
  startService,
  table,
  verdict,
  type BodyCheck,
  type Measurement,
} from "./support.js";

const LEVELS = [10, 50];
/** The fewest codes an exchange measurement gets (exchangeRound). */
const CODES = QUICK ? 1000 : 4000;
/** Approvals in flight while minting codes for a round of ours. */
const MINT_CONCURRENCY = 50;
const REDIRECT = "http://127.0.0.1:9/cb";
const SCOPE = "accounts:read";
const TOKEN_RESPONSE: BodyCheck = { status: 200, keys: ["access_token", "refresh_token", "token_type"] };

const verifier = randomBytes(32).toString("base64url");
const challenge = createHash("sha256").update(verifier).digest("base64url");

interface Contender {
  name: string;
  /** The process that answers (its main thread's waits are printed). */
  pid: number;
  tokenUrl: string;
  clientId: string;
  clientSecret: string;
  /** Fresh single-use codes bound to REDIRECT and `challenge`. */
  mintCodes(n: number): Promise<string[]>;
  close(): Promise<void>;
}

export async function run(): Promise<void> {
  const db = await benchDatabase();
  const ours = await startOurs(db.url);
  const peer = await startPeer(db.url);
  const inMemory = await startPeer();
  try {
    // Warm-up: JIT, pools, the client-secret check; and first rates (redeeming, minting) for exchangeRound.
    const rates = new Map<string, number>();
    for (const c of [ours, peer, inMemory]) rates.set(c.name, (await exchangeLoad(c, await mintTimed(c, 300, rates), 10)).rps);
    for (const grant of ["exchange", "refresh"] as const) {
      const cmp = await alternateAtLevels(`${grant}: vaultgate vs oidc-provider on PostgreSQL (and in memory)`, LEVELS, (connections) =>
        [ours, peer, inMemory].map((c) => ({
          name: c.name,
          measure: async () =>
            grant === "exchange" ? exchangeRound(c, connections, rates) : refreshLoad(c, await refreshTokens(c, connections * 2), connections),
        })),
      );
      // The floor every change keeps (each side at its peak, where it was first set), and
      // the goal at equal concurrency.
      for (const { connections, result } of cmp.perLevel) {
        const vsMemory = roundRatios(result.sides[0]!, result.sides[2]!);
        console.log(
          `${grant} at ${connections} connections vs oidc-provider in memory (information): ${fmt(median(vsMemory), 2)}x (rounds ${vsMemory.map((r) => fmt(r, 2)).join(", ")})`,
        );
      }
      verdict(`${grant} >= 1.0x oidc-provider on PostgreSQL, each at its peak (floor)`, `${fmt(cmp.peakRatio, 2)}x`, cmp.peakRatio >= 1 && cmp.failures === 0);
      for (const { connections, result } of cmp.perLevel) {
        verdict(
          `${grant} >= 1.5x oidc-provider on PostgreSQL at ${connections} connections`,
          `${fmt(result.ratio, 2)}x (rounds ${result.ratios.map((r) => fmt(r, 2)).join(", ")})`,
          result.ratio >= 1.5 && result.failures === 0,
        );
      }
    }

    const lat = await revocationToRefusal(ours as OurContender, 200);
    table([
      {
        measure: "dashboard revoke -> next verification refused (200 trials)",
        "p50 ms": fmt(lat.p50, 2),
        "p99 ms": fmt(lat.p99, 2),
        "max ms": fmt(lat.max, 2),
      },
    ]);
    verdict("revocation-to-refusal p99 < 50 ms (the promise is 3 s)", `${fmt(lat.p99, 2)} ms`, lat.p99 < 50);
  } finally {
    await ours.close();
    await peer.close();
    await inMemory.close();
    await db.drop();
  }
}

/**
 * How long an authorization code stays good, on both servers (ours; oidc-provider's
 * default is the same 60 s). Every code of a round must be redeemed within it.
 */
const CODE_LIFETIME_S = CODE_TTL_MS / 1000;
/** The share of a code's lifetime a round may use for minting and redeeming its codes. */
const CODE_BUDGET_S = CODE_LIFETIME_S * 0.75;

/**
 * Each code is used once, so a round gets as many codes as it can mint and redeem within
 * CODE_BUDGET_S at the last rates seen: minting is slow, and codes minted too early expire
 * before the load reaches them (counted as failures).
 */
async function exchangeRound(c: Contender, connections: number, rates: Map<string, number>): Promise<Measurement> {
  const key = `${c.name} at ${connections}`;
  const rate = rates.get(key) ?? rates.get(c.name) ?? 0;
  const wanted = Math.max(CODES, Math.ceil(rate * seconds(8)));
  const mintRate = rates.get(`${c.name} minting`);
  const fits = mintRate && rate ? Math.floor(CODE_BUDGET_S / (1 / mintRate + 1 / rate)) : wanted;
  const n = Math.min(wanted, fits);
  if (n < wanted) console.log(`${key}: ${n} codes instead of ${wanted}, so that each is redeemed within ${CODE_BUDGET_S} s of its minting`);
  const m = await exchangeLoad(c, await mintTimed(c, n, rates), connections);
  rates.set(key, m.rps);
  return m;
}

/** `n` fresh codes from `c`, keeping its minting rate (codes a second) in `rates`. */
async function mintTimed(c: Contender, n: number, rates: Map<string, number>): Promise<string[]> {
  const t = performance.now();
  const codes = await c.mintCodes(n);
  rates.set(`${c.name} minting`, n / ((performance.now() - t) / 1000));
  return codes;
}

/** The token request that redeems `code` (PKCE verifier, client_secret_post). */
function exchangeForm(c: Contender, code: string): string {
  return new URLSearchParams({
    grant_type: "authorization_code",
    code,
    redirect_uri: REDIRECT,
    code_verifier: verifier,
    client_id: c.clientId,
    client_secret: c.clientSecret,
  }).toString();
}

/** Each code once; req/s over the wall time from the first request to the last response. */
function exchangeLoad(c: Contender, codes: string[], connections: number): Promise<Measurement> {
  return load({
    url: c.tokenUrl,
    method: "POST",
    connections,
    server: c.pid,
    headers: { "content-type": "application/x-www-form-urlencoded" },
    bodies: codes.map((code) => exchangeForm(c, code)),
    check: TOKEN_RESPONSE,
  });
}

/**
 * Each in-flight request holds one lineage and presents its newest refresh token; the
 * answer's token goes back to the pool (bench/loadgen.ts).
 */
function refreshLoad(c: Contender, tokens: string[], connections: number): Promise<Measurement> {
  return load({
    url: c.tokenUrl,
    method: "POST",
    connections,
    server: c.pid,
    headers: { "content-type": "application/x-www-form-urlencoded" },
    rotate: { tokens, field: "refresh_token", form: { grant_type: "refresh_token", client_id: c.clientId, client_secret: c.clientSecret } },
    check: TOKEN_RESPONSE,
  });
}

/** One refresh token per lineage: fresh codes exchanged at the token endpoint, as a client would. */
async function refreshTokens(c: Contender, n: number): Promise<string[]> {
  const out: string[] = [];
  for (const code of await c.mintCodes(n)) {
    const res = await fetch(c.tokenUrl, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: exchangeForm(c, code),
    });
    const body = (await res.json()) as { refresh_token?: string };
    if (!body.refresh_token) throw new Error(`${c.name}: code exchange failed: ${res.status} ${JSON.stringify(body)}`);
    out.push(body.refresh_token);
  }
  return out;
}

interface OurContender extends Contender {
  url: string;
  clients: CoreClients;
  sessionCookie: string;
}

/** `vaultgate serve --role all` as shipped; fixtures through core's gRPC API, as the CLI reaches it. */
async function startOurs(databaseUrl: string): Promise<OurContender> {
  const adminToken = randomBytes(16).toString("hex");
  const gatewayToken = randomBytes(16).toString("hex");
  const dir = await tempDataDir();
  const service = await startService({ DATABASE_URL: databaseUrl, DATA_DIR: dir.path, ADMIN_TOKEN: adminToken, GATEWAY_TOKEN: gatewayToken });
  const clients = createCoreClients(createGrpcTransport({ baseUrl: service.coreUrl }), { gatewayToken });
  const adminCall = { headers: { authorization: `Bearer ${adminToken}` } };

  const email = `bench-${randomBytes(4).toString("hex")}@example.com`;
  const user = await clients.partners.createUser({ email }, adminCall);
  const ch = await clients.grants.startSignIn({ email });
  const { messages } = await clients.grants.listOutbox({ email }, adminCall);
  const otp = /\d{6}/.exec(messages[0]!.subject)![0];
  const { sessionToken } = await clients.grants.completeSignIn({ challengeId: ch.challengeId, code: otp });
  const reg = await clients.grants.registerClient({
    clientName: "bench",
    redirectUris: [REDIRECT],
    tokenEndpointAuthMethod: "client_secret_post",
    scope: SCOPE,
  });
  const request = {
    clientId: reg.client!.clientId,
    redirectUri: REDIRECT,
    scope: SCOPE,
    resources: [`urn:vaultgate:vault:${user.vaultId}`],
    codeChallenge: challenge,
    codeChallengeMethod: "S256",
    sessionToken: "",
  };
  return {
    name: "vaultgate",
    pid: service.pid,
    url: service.gatewayUrl,
    tokenUrl: `${service.gatewayUrl}/oauth2/token`,
    clientId: reg.client!.clientId,
    clientSecret: reg.clientSecret,
    clients,
    sessionCookie: `vg_session=${sessionToken}`,
    async mintCodes(n) {
      // MINT_CONCURRENCY approvals always in flight (not batches waiting for their slowest):
      // the consent path is not group-committed, so minting speed is bounded by the service.
      const out: string[] = new Array<string>(n);
      let next = 0;
      const minter = async () => {
        while (next < n) {
          const i = next++;
          out[i] = (await clients.grants.approveAuthorization({ request, sessionToken, vaultId: user.vaultId })).code;
        }
      };
      await Promise.all(Array.from({ length: Math.min(MINT_CONCURRENCY, n) }, minter));
      return out;
    },
    async close() {
      await service.stop();
      await dir.remove();
    },
  };
}

/** node-oidc-provider in its own process (bench/agent-oauth-peer.ts). */
/** oidc-provider storing its models on the bench cluster at `databaseUrl`, or in memory without one. */
async function startPeer(databaseUrl?: string): Promise<Contender> {
  const peer = await startBenchChild<{ tokenUrl: string; clientId: string; clientSecret: string }>(
    "agent-oauth-peer",
    databaseUrl ? [challenge, databaseUrl] : [challenge],
  );
  return {
    name: databaseUrl ? "oidc-provider on PostgreSQL" : "oidc-provider in memory",
    pid: peer.pid,
    ...peer.info,
    mintCodes: (n) => peer.call<string[]>("codes", n),
    close: () => peer.stop(),
  };
}

/** The user revokes on the dashboard (real HTTP form post); time until verification refuses. */
async function revocationToRefusal(ours: OurContender, trials: number) {
  // The form token a signed-in browser gets: read it from the dashboard page.
  const cookie = ours.sessionCookie;
  const dashboard = await (await fetch(`${ours.url}/dashboard/agents`, { headers: { cookie } })).text();
  const csrf = /name="csrf" value="([^"]+)"/.exec(dashboard)?.[1];
  if (!csrf) throw new Error("no form token on the dashboard");
  const latencies: number[] = [];
  const codes = await ours.mintCodes(trials);
  for (const code of codes) {
    const { token } = await ours.clients.grants.exchangeCode({
      clientId: ours.clientId,
      clientSecret: ours.clientSecret,
      code,
      redirectUri: REDIRECT,
      codeVerifier: verifier,
    });
    const { grant } = await ours.clients.grants.verifyAgentToken({ accessToken: token!.accessToken });
    const t0 = performance.now();
    const res = await fetch(`${ours.url}/dashboard/agents/${grant!.agentPrincipalId}/grants/${grant!.grantId}/revoke`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", cookie },
      body: `csrf=${csrf}`,
      redirect: "manual",
    });
    await res.arrayBuffer();
    if (res.status !== 303) throw new Error(`revoke failed: ${res.status}`);
    for (;;) {
      try {
        await ours.clients.grants.verifyAgentToken({ accessToken: token!.accessToken });
      } catch (err) {
        // Only the refusal ends the wait: a failed call would otherwise pass for one.
        if (ConnectError.from(err).code !== Code.Unauthenticated) throw err;
        break;
      }
    }
    latencies.push(performance.now() - t0);
  }
  return { p50: median(latencies), p99: percentile(latencies, 99), max: Math.max(...latencies) };
}
