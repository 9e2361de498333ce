/** The chaos run's world: its records, fixtures and the admin and database helpers the clients share. */
import { createServer, type Server } from "node:http";
import pg from "pg";
import type { CoreClients } from "../gateways/core-clients.js";
import { adminClients, type Database, type Replica } from "./cluster.js";
import { attempt, rpcResult, type History } from "./history.js";
import type { Rng } from "./rng.js";
import type { ChainRun } from "./chain.js";
import { AGENT_SCOPES, PARTNER_SCOPES } from "../lib/vocabulary.js";

export interface Owner {
  index: number;
  userId: string;
  rootVaultId: string;
  childVaultId: string;
  caps: { perTx: number; perDay: number; lifetime: number };
  funded: number;
  /** Current agent grant on the child vault, and the owner's step-up grant on the root vault. */
  agent: { token: string; refresh: string; grantId: string };
  owner: { token: string; grantId: string };
  principal: string;
  reissuing: boolean;
  /** Pays only on the evm chain, with room for a steady stream of payments the whole run. */
  evmOnly?: boolean;
}

export interface Partner {
  index: number;
  clientId: string;
  token: string;
  payerEntityId: string;
  caps: { perItem: number; perDay: number; lifetime: number };
  funded: number;
  recipients: string[];
  pool: PoolItem[];
  status: "active" | "suspended";
}

export interface PoolItem {
  execution_id: string;
  payout_id: string;
  recipient: { user_id: string };
  amount_cents: number;
  currency: string;
  reference: string;
}

/** When a grant stopped being usable, as the client saw it: the answer to the revocation arrived. */
export interface GrantDeath {
  grantId: string;
  userId: string;
  cause: "kill_switch" | "refresh";
  /** The revoking request's start and the arrival of its successful answer. */
  revokeStart: number;
  deadAt: number;
}

/** The issue time of each grant (answer received), so a kill switch kills only earlier ones. */
export interface GrantIssue {
  grantId: string;
  userId: string;
  issuedAt: number;
}

export interface Suspension {
  partner: number;
  /** Suspension answered (committed) at; resumption requested at (Infinity while open). */
  suspendedAt: number;
  resumeStart: number;
}

export interface Delivery {
  partner: number;
  at: number;
  webhookId: string;
  type: string;
  data: unknown;
}

export interface FaultEvent {
  kind: string;
  start: number;
  end: number;
  detail: string;
}

export interface World {
  rng: Rng;
  history: History;
  replicas: Replica[];
  db: Database;
  adminToken: string;
  owners: Owner[];
  partners: Partner[];
  deaths: GrantDeath[];
  issues: GrantIssue[];
  suspensions: Suspension[];
  deliveries: Delivery[];
  faults: FaultEvent[];
  /** The evm chain the replicas settle on (absent: every chain on the sandbox rail). */
  chain?: ChainRun;
  /** Audit followers: per agent principal, every record id it was handed (with repeats). */
  followers: Map<string, { watermark: string; seen: string[] }>;
  deadline: number;
  receiver: Server;
  receiverUrl: string;
  log: (msg: string) => void;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function jwtPayload(token: string): { jti: string; act?: { sub: string } } {
  return JSON.parse(Buffer.from(token.split(".")[1]!, "base64url").toString("utf8"));
}

/** An admin call against any replica that is up, retried through faults. */
export async function admin<T>(w: World, rng: Rng, call: (c: CoreClients) => Promise<T>, tries = 40): Promise<T> {
  let last: unknown;
  for (let i = 0; i < tries; i++) {
    const up = w.replicas.filter((r) => r.up);
    const r = up.length ? rng.pick(up) : w.replicas[0]!;
    try {
      return await call(adminClients(r, w.adminToken));
    } catch (err) {
      last = err;
      await sleep(250 + 50 * i);
    }
  }
  throw last;
}

export async function startReceiver(w: Pick<World, "deliveries">): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    const at = Date.now();
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      const partner = Number(/\/hook\/(\d+)/.exec(req.url ?? "")?.[1] ?? -1);
      let parsed: { type?: string; data?: unknown } = {};
      try {
        parsed = JSON.parse(body);
      } catch {
        /* recorded as is */
      }
      w.deliveries.push({ partner, at, webhookId: String(req.headers["webhook-id"] ?? ""), type: parsed.type ?? "?", data: parsed.data });
      res.writeHead(200).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  return { server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}` };
}

// ---------------------------------------------------------------- fixtures

export async function createFixtures(w: World, owners: number, partners: number): Promise<void> {
  const rng = w.rng.fork("fixtures");
  const r0 = w.replicas[0]!;
  const a = adminClients(r0, w.adminToken);
  // With a chain, one more owner keeps evm payments (and so settlement work) coming all along.
  for (let i = 0; i < owners + (w.chain ? 1 : 0); i++) {
    const user = await a.partners.createUser({ email: `chaos-owner-${i}-${rng.hex(8)}@example.test` });
    const ownerTok = (await a.grants.issueGrant({ userId: user.userId, vaultId: user.vaultId, scopes: [...AGENT_SCOPES], stepUp: true })).token!;
    // Which limit binds first differs per owner: the day cap, the balance or the lifetime cap.
    const shapes = [
      { perTx: 1500, perDay: 4000, lifetime: 6000, funded: 10_000 },
      { perTx: 1500, perDay: 6000, lifetime: 9000, funded: 3000 },
      { perTx: 1000, perDay: 9000, lifetime: 3500, funded: 10_000 },
    ];
    const evmOnly = i === owners;
    const shape = evmOnly ? { perTx: 2000, perDay: 1_000_000, lifetime: 1_000_000, funded: 1_000_000 } : shapes[i % shapes.length]!;
    const budget = await attempt(w.history, `fixture-budget-${i}`, "fixture", r0, {
      method: "POST",
      path: "/mcp/treasury",
      headers: { authorization: `Bearer ${ownerTok.accessToken}` },
      body: {
        jsonrpc: "2.0",
        id: 1,
        method: "agent.budget.create",
        params: {
          purpose: "trip",
          display_name: `Chaos budget ${i}`,
          amount_cap_cents_per_tx: shape.perTx,
          amount_cap_cents_per_day: shape.perDay,
          amount_cap_cents_lifetime: shape.lifetime,
          step_up_amount_cents: 1_000_000,
          chain_allowlist: ["base", "eth"],
          idempotency_key: `chaos-fixture-${i}-${rng.hex(8)}`,
        },
      },
    });
    const created = rpcResult<{ vault_id: string; status: string }>(budget);
    if (!created) throw new Error(`fixture budget failed: ${JSON.stringify(budget.response ?? budget.error)}`);
    if (created.status !== "active") throw new Error(`fixture budget is ${created.status}, expected active`);
    await a.budgets.fundVault({ vaultId: created.vault_id, amountCents: BigInt(shape.funded) });
    const agentTok = (await a.grants.issueGrant({ userId: user.userId, vaultId: created.vault_id, scopes: [...AGENT_SCOPES] })).token!;
    const now = Date.now();
    w.issues.push({ grantId: ownerTok.jti, userId: user.userId, issuedAt: now }, { grantId: agentTok.jti, userId: user.userId, issuedAt: now });
    w.owners.push({
      index: i,
      userId: user.userId,
      rootVaultId: user.vaultId,
      childVaultId: created.vault_id,
      caps: { perTx: shape.perTx, perDay: shape.perDay, lifetime: shape.lifetime },
      funded: shape.funded,
      agent: { token: agentTok.accessToken, refresh: agentTok.refreshToken, grantId: agentTok.jti },
      owner: { token: ownerTok.accessToken, grantId: ownerTok.jti },
      principal: jwtPayload(agentTok.accessToken).act!.sub,
      reissuing: false,
      evmOnly,
    });
  }
  for (let i = 0; i < partners; i++) {
    const res = await a.partners.createPartner({
      name: `Chaos Partner ${i} ${rng.hex(6)}`,
      entitlements: { scopes: [...PARTNER_SCOPES] },
      webhookUrl: `${w.receiverUrl}/hook/${i}`,
    });
    const clientId = res.partner!.clientId;
    // As `vaultgate partner create --webhook-url` does: the signing secret comes with SetWebhook.
    await a.partnerResources.setWebhook({ clientId, url: `${w.receiverUrl}/hook/${i}` });
    const payerEntityId = rng.uuid();
    const caps = { perItem: 2000, perDay: 9000, lifetime: 14_000 };
    const funded = i % 2 === 0 ? 20_000 : 7000;
    await a.treasury.bindTreasury({
      clientId,
      payerEntityId,
      balanceCents: BigInt(funded),
      currency: "USD",
      capPerItemCents: BigInt(caps.perItem),
      capPerDayCents: BigInt(caps.perDay),
      capLifetimeCents: BigInt(caps.lifetime),
    });
    const recipients: string[] = [];
    for (let k = 0; k < 3; k++) {
      const u = await a.partners.createUser({ email: `chaos-recipient-${i}-${k}-${rng.hex(8)}@example.test` });
      await a.partnerResources.grantConsent({ clientId, userId: u.userId, scopes: { scopes: ["payouts:receive"] } });
      recipients.push(u.userId);
    }
    const token = (await a.partners.issueToken({ clientId, clientSecret: res.clientSecret })).accessToken;
    const pool: PoolItem[] = [];
    for (let k = 0; k < 40; k++) {
      pool.push({
        execution_id: `exec-${i}-${k}-${rng.hex(6)}`,
        payout_id: `payout-${i}-${k}-${rng.hex(6)}`,
        recipient: { user_id: rng.pick(recipients) },
        // Mostly under the per-item cap, sometimes exactly on it, sometimes one above.
        amount_cents: rng.pick([rng.int(100, 1500), caps.perItem, caps.perItem + 1, rng.int(500, 2000)]),
        currency: "USD",
        reference: `chaos ${i}/${k}`,
      });
    }
    w.partners.push({ index: i, clientId, token, payerEntityId, caps, funded, recipients, pool, status: "active" });
  }
}

// ---------------------------------------------------------------- request helpers

export async function withDb<T>(url: string, fn: (c: pg.Client) => Promise<T>, tries = 20): Promise<T> {
  let last: unknown;
  for (let i = 0; i < tries; i++) {
    const c = new pg.Client({ connectionString: url });
    try {
      await c.connect();
      return await fn(c);
    } catch (err) {
      last = err;
      await sleep(300);
    } finally {
      await c.end().catch(() => undefined);
    }
  }
  throw last;
}
