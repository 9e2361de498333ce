import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { createRouterTransport } from "@connectrpc/connect";
import { expect } from "chai";
import type { FastifyInstance } from "fastify";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { PartnerResourcesService } from "../../../gen/vaultgate/partners/v1/resources_pb.js";
import { fail } from "../../../core/errors.js";
import { buildGateway } from "../../../gateways/app.js";
import { createCoreClients } from "../../../gateways/core-clients.js";
import { resourceErrorTable } from "../../../gateways/partner/resource-envelope.js";
import { createCapturedLogger } from "../../support/logs.js";
import { loadOpenApi } from "../../support/openapi.js";

const USER = "6f1c2b1e-8d1a-4c55-9b1e-2f6a1d7c9e01";

/** The gateway over a stub core whose getKycStatus throws `thrown` (the one place core is a stub). */
async function gatewayThrowing(thrown: () => never): Promise<{ app: FastifyInstance; url: string; logs: ReturnType<typeof createCapturedLogger> }> {
  const transport = createRouterTransport(({ service }) => {
    service(PartnerResourcesService, { getKycStatus: () => thrown() });
  });
  const logs = createCapturedLogger();
  const app = await buildGateway({ clients: createCoreClients(transport), logger: logs.logger });
  await app.listen({ port: 0, host: "127.0.0.1" });
  return { app, url: `http://127.0.0.1:${(app.server.address() as { port: number }).port}`, logs };
}

describe("resource envelope", () => {
  const reasons = Object.values(Reason).filter((v): v is Reason => typeof v === "number");

  it("renders every Reason from its table row, with request_id = X-Request-Id, as the served OpenAPI document describes", async () => {
    let openapi: Awaited<ReturnType<typeof loadOpenApi>> | undefined;
    for (const reason of reasons) {
      const { app, url } = await gatewayThrowing(() => fail(reason, "client-facing text", { retryAfterSeconds: 60 }));
      try {
        const res = await fetch(`${url}/api/partner/users/${USER}/kyc`, { headers: { authorization: "Bearer x.y.z" } });
        const body = (await res.json()) as { error: { code: string; message: string; request_id: string } };
        openapi ??= await loadOpenApi(url);
        openapi.matches("ResourceError", body);
        const row = resourceErrorTable[reason];
        expect(res.status, Reason[reason]).to.equal(row.status);
        expect(body.error.code).to.equal(row.code);
        expect(body.error.request_id).to.equal(res.headers.get("x-request-id"));
        if (row.status >= 500) expect(body.error.message).to.not.equal("client-facing text");
        else expect(body.error.message).to.equal("client-facing text");
        if (row.status === 401) expect(res.headers.get("www-authenticate")).to.match(/^Bearer/);
        if (row.status === 429) expect(res.headers.get("retry-after")).to.equal("60");
        if (reason === Reason.UNAVAILABLE) {
          // A database outage: retryable, with the wait core gave.
          expect([res.status, body.error.code]).to.deep.equal([503, "temporarily_unavailable"]);
          expect(res.headers.get("retry-after")).to.equal("60");
        }
      } finally {
        await app.close();
      }
    }
  });

  it("an unhandled error is 500 internal_error with nothing internal in the body", async () => {
    const { app, url, logs } = await gatewayThrowing(() => {
      throw new Error('relation "user_kyc" does not exist at /srv/core/secret-path.ts');
    });
    try {
      const res = await fetch(`${url}/api/partner/users/${USER}/kyc`, { headers: { authorization: "Bearer x.y.z" } });
      const text = await res.text();
      expect(res.status).to.equal(500);
      const body = JSON.parse(text) as { error: { code: string; request_id: string } };
      expect(body.error.code).to.equal("internal_error");
      expect(body.error.request_id).to.equal(res.headers.get("x-request-id"));
      expect(text).to.not.match(/relation|secret-path|user_kyc/);
      expect(logs.text()).to.not.include("Bearer x.y.z");
    } finally {
      await app.close();
    }
  });

  it("an unknown partner path, and a method a path does not answer, answer in the envelope the document describes", async () => {
    const { app, url } = await gatewayThrowing(() => fail(Reason.INTERNAL, "x"));
    try {
      const openapi = await loadOpenApi(url);
      const res = await fetch(`${url}/api/partner/nope`);
      const body = (await res.json()) as { error: { code: string; request_id: string } };
      expect(res.status).to.equal(404);
      expect(body.error.request_id).to.equal(res.headers.get("x-request-id"));
      openapi.matches("ResourceError", body);
      const wrongMethod = await fetch(`${url}/api/partner/users/${USER}/kyc`, { method: "DELETE" });
      const refused = (await wrongMethod.json()) as { error: { code: string } };
      expect([wrongMethod.status, refused.error.code]).to.deep.equal([405, "method_not_allowed"]);
      openapi.matches("ResourceError", refused);
    } finally {
      await app.close();
    }
  });

  it("gateways never import core/ or knex (layering)", async () => {
    const files: string[] = [];
    async function walk(dir: string) {
      for (const e of await readdir(dir, { withFileTypes: true })) {
        if (e.isDirectory()) await walk(join(dir, e.name));
        else if (e.name.endsWith(".ts")) files.push(join(dir, e.name));
      }
    }
    await walk("gateways");
    for (const f of files) {
      const text = await readFile(f, "utf8");
      expect(text, f).to.not.match(/from "(\.\.\/)+core\//);
      expect(text, f).to.not.match(/from "knex"/);
    }
  });
});
