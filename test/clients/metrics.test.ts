import { randomBytes } from "node:crypto";
import { expect } from "chai";
import { startMetricsServer, type MetricsServer } from "../../cli/metrics-server.js";
import { ConfigError, loadConfig } from "../../cli/config.js";
import { coreRegistry } from "../../core/observability/metrics.js";
import { createGroupCommit } from "../../core/db/group-commit.js";
import { createSecretHasher } from "../../core/secrets/hasher.js";
import { gatewayRegistry } from "../../gateways/shared/observability.js";
import { startStack, type TestStack } from "../support/stack.js";
import { createPartner } from "../support/partners.js";
import { parseScrape } from "../support/metrics.js";
import { expectInternalError, expectRefused } from "../support/refusals.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { PartnerStatus } from "../../gen/vaultgate/partners/v1/partners_pb.js";

/** The series `name` whose labels include every given pair (0 when absent). */
function value(series: Map<string, number>, name: string, labels: Record<string, string> = {}): number {
  const want = Object.entries(labels).map(([k, v]) => `${k}="${v}"`);
  let sum = 0;
  let found = false;
  for (const [key, v] of series) {
    const brace = key.indexOf("{");
    const base = brace < 0 ? key : key.slice(0, brace);
    if (base !== name) continue;
    const inner = brace < 0 ? "" : key.slice(brace + 1, -1);
    if (want.every((w) => inner.split(",").includes(w))) {
      sum += v;
      found = true;
    }
  }
  return found ? sum : 0;
}

describe("metrics: GET /metrics on the metrics listener", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let metrics: MetricsServer;
  let auditBroken = false;
  const token = randomBytes(16).toString("hex");

  before(async () => {
    stack = await startStack({
      gateway: true,
      webhookPollMs: 0,
      auditFaults: { appendFault: () => (auditBroken ? new Error("injected audit fault") : undefined) },
    });
    metrics = await startMetricsServer({ host: "127.0.0.1", port: 0, token, registries: [coreRegistry, gatewayRegistry] });
  });
  after(async () => {
    await metrics?.close();
    await stack?.close();
  });

  const scrape = async () => {
    const res = await fetch(metrics.url, { headers: { authorization: `Bearer ${token}` } });
    expect(res.status).to.equal(200);
    expect(res.headers.get("content-type")).to.match(/^text\/plain; version=0\.0\.4/);
    return parseScrape(await res.text());
  };

  it("is not served on the public gateway port", async () => {
    const res = await fetch(`${stack.url}/metrics`);
    expect(res.status).to.equal(404);
  });

  it("refuses a scrape without the metrics token, or with a wrong one", async () => {
    expect((await fetch(metrics.url)).status).to.equal(401);
    expect((await fetch(metrics.url, { headers: { authorization: `Bearer ${token}x` } })).status).to.equal(401);
    expect((await fetch(metrics.url, { headers: { authorization: token } })).status).to.equal(401);
    expect((await fetch(metrics.url.replace("/metrics", "/other"), { headers: { authorization: `Bearer ${token}` } })).status).to.equal(404);
  });

  it("counts gateway requests by route pattern and status class, and core RPCs by method and code", async () => {
    const before = await scrape();
    for (let i = 0; i < 3; i++) expect((await fetch(`${stack.url}/.well-known/agent-jwks.json`)).status).to.equal(200);
    expect((await fetch(`${stack.url}/no-such-page-${randomBytes(4).toString("hex")}`)).status).to.equal(404);
    const after = await scrape();

    const http = { method: "GET", route: "/.well-known/agent-jwks.json", status_class: "2xx" };
    expect(value(after, "vaultgate_http_request_duration_seconds_count", http) - value(before, "vaultgate_http_request_duration_seconds_count", http)).to.equal(
      3,
    );
    expect(value(after, "vaultgate_http_request_duration_seconds_bucket", { ...http, le: "+Inf" })).to.equal(
      value(after, "vaultgate_http_request_duration_seconds_count", http),
    );
    // A 404 is labelled with a fixed route, never the raw path (no unbounded series).
    const missing = { route: "unmatched", status_class: "4xx" };
    expect(
      value(after, "vaultgate_http_request_duration_seconds_count", missing) - value(before, "vaultgate_http_request_duration_seconds_count", missing),
    ).to.equal(1);
    expect([...after.keys()].some((k) => k.includes("no-such-page"))).to.equal(false);

    const rpc = { service: "vaultgate.grants.v1.GrantsService", method: "GetJwks", code: "OK" };
    expect(value(after, "vaultgate_core_rpc_duration_seconds_count", rpc) - value(before, "vaultgate_core_rpc_duration_seconds_count", rpc)).to.equal(3);
  });

  it("labels refused RPCs with their gRPC code", async () => {
    const before = await scrape();
    await expectRefused(stack.clients.audit.listRecords({ limit: 1 }), Reason.ADMIN_UNAUTHENTICATED);
    const after = await scrape();
    const refused = { service: "vaultgate.audit.v1.AuditService", method: "ListRecords", code: "UNAUTHENTICATED" };
    expect(value(after, "vaultgate_core_rpc_duration_seconds_count", refused) - value(before, "vaultgate_core_rpc_duration_seconds_count", refused)).to.equal(
      1,
    );
  });

  it("reports the database pool and process metrics", async () => {
    const s = await scrape();
    expect(value(s, "vaultgate_db_pool_max")).to.be.greaterThan(0);
    expect(s.has("vaultgate_db_pool_connections_in_use")).to.equal(true);
    expect(s.has("vaultgate_db_pool_connections_idle")).to.equal(true);
    expect(s.has("vaultgate_db_pool_pending_acquires")).to.equal(true);
    expect(value(s, "process_cpu_user_seconds_total")).to.be.greaterThan(0);
    expect(s.has("nodejs_eventloop_lag_seconds")).to.equal(true);
  });

  it("counts failed audit writes", async () => {
    const before = await scrape();
    auditBroken = true;
    try {
      // Partner creation must fail without its audit record.
      await expectInternalError(createPartner(stack));
    } finally {
      auditBroken = false;
    }
    const after = await scrape();
    expect(value(after, "vaultgate_audit_write_failures_total") - value(before, "vaultgate_audit_write_failures_total")).to.be.at.least(1);
  });

  const insertDueEvent = (partnerId: string, ageMs: number) => {
    const due = new Date(stack.clock().getTime() - ageMs);
    return stack.core.db.raw(
      `INSERT INTO partner_events (id, partner_id, type, data, created_at, next_attempt_at) VALUES (gen_random_uuid(), ?, 'kyc.status_changed', '{}'::jsonb, ?, ?)`,
      [partnerId, due, due],
    );
  };

  it("reports the age of the oldest due, undelivered webhook event", async () => {
    const { partnerId, clientId } = await createPartner(stack, { webhookUrl: "https://hooks.example/lag" });
    await stack.admin.partnerResources.setWebhook({ clientId, url: "https://hooks.example/lag" });
    await insertDueEvent(partnerId, 120_000);
    try {
      expect(value(await scrape(), "vaultgate_webhook_outbox_lag_seconds")).to.be.at.least(120);
    } finally {
      await stack.core.db.raw(`DELETE FROM partner_events WHERE partner_id = ?`, [partnerId]);
    }
  });

  it("does not count events nobody is to send: a feed-only partner's, or a suspended partner's", async () => {
    const feedOnly = await createPartner(stack);
    const suspended = await createPartner(stack, { webhookUrl: "https://hooks.example/suspended" });
    await stack.admin.partnerResources.setWebhook({ clientId: suspended.clientId, url: "https://hooks.example/suspended" });
    await stack.admin.partners.setPartnerStatus({ clientId: suspended.clientId, status: PartnerStatus.SUSPENDED });
    const tenDays = 10 * 24 * 3600_000;
    for (const p of [feedOnly, suspended]) await insertDueEvent(p.partnerId, tenDays);
    try {
      // Such events wait by design (read through GET /events, or sent after reactivation): no alert is due.
      expect(value(await scrape(), "vaultgate_webhook_outbox_lag_seconds")).to.be.below(tenDays / 2000);
    } finally {
      await stack.core.db.raw(`DELETE FROM partner_events WHERE partner_id = ANY(?::uuid[])`, [[feedOnly.partnerId, suspended.partnerId]]);
    }
  });

  it("records group-commit batch sizes per named batcher", async () => {
    const name = `test_${randomBytes(3).toString("hex")}`;
    const submit = createGroupCommit<number, number>(async (items) => items, { maxBatch: 64, maxInFlight: 1, name });
    await Promise.all([1, 2, 3, 4, 5].map(submit));
    const s = await scrape();
    expect(value(s, "vaultgate_group_commit_batch_size_count", { batcher: name })).to.equal(1);
    expect(value(s, "vaultgate_group_commit_batch_size_sum", { batcher: name })).to.equal(5);
  });

  it("shows the items waiting for a group-commit batch, and none once the batches ran", async () => {
    const name = `test_${randomBytes(3).toString("hex")}`;
    let open!: () => void;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const submit = createGroupCommit<number, number>(
      async (items) => {
        await gate;
        return items;
      },
      { maxBatch: 64, maxInFlight: 1, name },
    );
    const first = submit(1);
    await new Promise((r) => setImmediate(r));
    // The one batch it may run is busy: these two wait.
    const rest = [submit(2), submit(3)];
    expect(value(await scrape(), "vaultgate_group_commit_queued", { batcher: name })).to.equal(2);
    open();
    expect(await Promise.all([first, ...rest])).to.deep.equal([1, 2, 3]);
    expect(value(await scrape(), "vaultgate_group_commit_queued", { batcher: name })).to.equal(0);
  });

  it("shows secret-check shedding", async () => {
    const before = await scrape();
    expect(before.has('vaultgate_secret_checks_queued{lane="unknown"}')).to.equal(true);
    const hasher = await createSecretHasher({ params: { N: 1024, r: 8, p: 1 }, maxConcurrent: 1, maxQueue: 1, maxWaitMs: 60_000 });
    const results = await Promise.allSettled([1, 2, 3, 4].map((i) => hasher.hash(`secret-${i}`)));
    const shed = results.filter((r) => r.status === "rejected").length;
    expect(shed).to.be.at.least(1);
    const after = await scrape();
    expect(value(after, "vaultgate_secret_checks_shed_total") - value(before, "vaultgate_secret_checks_shed_total")).to.equal(shed);
    expect(value(after, "vaultgate_secret_checks_queued")).to.equal(0);
    expect(value(after, "vaultgate_secret_checks_active")).to.equal(0);
  });
});

describe("metrics settings", () => {
  it("are off unless METRICS_PORT is set, and a non-loopback METRICS_HOST needs METRICS_TOKEN", () => {
    expect(loadConfig({}).metricsPort).to.equal(undefined);
    expect(loadConfig({ METRICS_PORT: "9464" })).to.include({ metricsPort: 9464, metricsHost: "127.0.0.1" });
    expect(() => loadConfig({ METRICS_PORT: "9464", METRICS_HOST: "0.0.0.0" })).to.throw(ConfigError, /METRICS_TOKEN/);
    expect(loadConfig({ METRICS_PORT: "9464", METRICS_HOST: "0.0.0.0", METRICS_TOKEN: "a".repeat(20) }).metricsHost).to.equal("0.0.0.0");
    expect(() => loadConfig({ METRICS_TOKEN: "short" })).to.throw(ConfigError, /METRICS_TOKEN/);
  });

  it("tracing is off by default; OTEL_TRACES_EXPORTER=otlp turns it on with the standard endpoint variables", () => {
    expect(loadConfig({}).tracing.exporter).to.equal("none");
    expect(loadConfig({ OTEL_TRACES_EXPORTER: "otlp", OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" }).tracing).to.deep.equal({
      exporter: "otlp",
      endpoint: "http://collector:4318/v1/traces",
      serviceName: "vaultgate",
    });
    expect(() => loadConfig({ OTEL_TRACES_EXPORTER: "zipkin" })).to.throw(ConfigError);
  });
});
