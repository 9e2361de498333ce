import { expect } from "chai";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { startCoreServer, type CoreServer } from "../../core/server.js";
import { startStack, type TestStack } from "../support/stack.js";
import { runCli } from "../support/process.js";
import { afterSendGap, createUser, latestCode } from "../support/agent-oauth.js";
import { ownerSession } from "../support/budgets.js";
import { expectRefused } from "../support/refusals.js";

/** `vaultgate user set-status` as a real process: what a deactivation ends stays ended after a reactivation. */
describe("operator CLI: deactivating and reactivating a user", () => {
  let stack: TestStack;
  let server: CoreServer;
  let env: Record<string, string>;
  before(async () => {
    stack = await startStack({ webhookPollMs: 0 });
    server = await startCoreServer(stack.core, 0, "127.0.0.1");
    env = { CORE_URL: server.url, ADMIN_TOKEN: stack.adminToken };
  });
  after(async () => {
    await server.close();
    await stack.close();
  });

  const setStatus = async (userId: string, status: string) => {
    const res = await runCli(["user", "set-status", userId, status, "--json"], env);
    expect(res.code, res.stderr).to.equal(0);
    expect(res.json).to.deep.equal({ user_id: userId, status });
  };

  it("ends the user's web sessions and codes: reactivated, the old session and code stay refused; a new sign-in works", async () => {
    const user = await createUser(stack);
    const session = await ownerSession(stack, user.userId);
    const other = await ownerSession(stack, (await createUser(stack)).userId);
    const pending = await afterSendGap(stack, () => stack.clients.grants.startSignIn({ email: user.email }));
    const pendingCode = await latestCode(stack, user.email);

    await setStatus(user.userId, "inactive");
    await expectRefused(stack.clients.grants.getSession({ sessionToken: session }), Reason.INVALID_TOKEN);
    await setStatus(user.userId, "active");
    await expectRefused(stack.clients.grants.getSession({ sessionToken: session }), Reason.INVALID_TOKEN);
    await expectRefused(stack.clients.grants.completeSignIn({ challengeId: pending.challengeId, code: pendingCode }), Reason.INVALID_GRANT);

    const fresh = await ownerSession(stack, user.userId);
    expect((await stack.clients.grants.getSession({ sessionToken: fresh })).session!.userId).to.equal(user.userId);
    // Another user's session is not touched.
    expect((await stack.clients.grants.getSession({ sessionToken: other })).session).to.exist;
    const ended = await stack.core.db("audit_records").where({ action: "user.set_status.inactive", subject: user.userId });
    expect(ended.map((r) => r.actor)).to.deep.equal(["admin"]);
  });
});
