import { expect } from "chai";
import { cliCoreSuite } from "../support/cli-core.js";
import { createPartner } from "../support/partners.js";
import { runCli } from "../support/process.js";
import { createUserFor } from "../support/resources.js";
import { startWebhookReceiver } from "../support/webhook-receiver.js";

/** `vaultgate partner list` shows when a partner's webhook URL answered 410 Gone, as a real process. */
describe("operator CLI: a paused webhook", function () {
  this.timeout(60_000);
  const suite = cliCoreSuite();

  /** The partner as `partner list` pages it (the database is shared: page until found, bounded). */
  async function listed(clientId: string): Promise<Record<string, unknown> | undefined> {
    let cursor: string | null = null;
    for (let pages = 0; pages < 1000; pages++) {
      const res = await runCli(["partner", "list", "--limit", "200", ...(cursor ? ["--cursor", cursor] : []), "--json"], suite.env);
      expect(res.code, res.stderr).to.equal(0);
      const found = (res.json!.partners as Record<string, unknown>[]).find((p) => p.client_id === clientId);
      cursor = res.json!.next_cursor as string | null;
      if (found || !cursor) return found;
    }
    return undefined;
  }

  it("webhook_gone_at is the time of the 410 until the URL is set again, null before and after", async () => {
    const { stack } = suite;
    let status = 410;
    const receiver = await startWebhookReceiver(() => status);
    try {
      const partner = await createPartner(stack, { webhookUrl: receiver.url });
      expect(await listed(partner.clientId)).to.include({ webhook_url: receiver.url, webhook_gone_at: null });
      const { userId } = await createUserFor(stack, partner);
      await stack.admin.partnerResources.recordLedgerEntry({ userId, direction: "credit", amountCents: 5n });
      stack.clock.advance(1500);
      const goneAt = stack.clock();
      while (receiver.received.length === 0) await stack.core.webhooks.runOnce();
      expect(await listed(partner.clientId)).to.include({ webhook_gone_at: goneAt.toISOString() });

      status = 204;
      const set = await runCli(["partner", "webhook", partner.clientId, "--url", receiver.url, "--json"], suite.env);
      expect(set.code, set.stderr).to.equal(0);
      expect(await listed(partner.clientId)).to.include({ webhook_gone_at: null });
    } finally {
      await receiver.close();
    }
  });
});
