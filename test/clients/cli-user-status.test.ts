import { expect } from "chai";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { cliCoreSuite } from "../support/cli-core.js";
import { runCli } from "../support/process.js";
import { afterSendGap, createUser, latestCode } from "../support/agent-oauth.js";
import { ownerSession } from "../support/budgets.js";
import { expectRefused } from "../support/refusals.js";

/** `vaultgate user set-status` as a real process: what a deactivation ends stays ended after a reactivation. */
describe("operator CLI: deactivating and reactivating a user", () => {
  const suite = cliCoreSuite();

  const setStatus = async (userId: string, status: string) => {
    const res = await runCli(["user", "set-status", userId, status, "--json"], suite.env);
    expect(res.code, res.stderr).to.equal(0);
    expect(res.json).to.deep.equal({ user_id: userId, status });
  };

  it("ends the user's web sessions and codes: reactivated, the old session and code stay refused; a new sign-in works", async () => {
    const user = await createUser(suite.stack);
    const session = await ownerSession(suite.stack, user.userId);
    const other = await ownerSession(suite.stack, (await createUser(suite.stack)).userId);
    const pending = await afterSendGap(suite.stack, () => suite.stack.clients.grants.startSignIn({ email: user.email }));
    const pendingCode = await latestCode(suite.stack, user.email);

    await setStatus(user.userId, "inactive");
    await expectRefused(suite.stack.clients.grants.getSession({ sessionToken: session }), Reason.INVALID_TOKEN);
    await setStatus(user.userId, "active");
    await expectRefused(suite.stack.clients.grants.getSession({ sessionToken: session }), Reason.INVALID_TOKEN);
    await expectRefused(suite.stack.clients.grants.completeSignIn({ challengeId: pending.challengeId, code: pendingCode }), Reason.INVALID_GRANT);

    const fresh = await ownerSession(suite.stack, user.userId);
    expect((await suite.stack.clients.grants.getSession({ sessionToken: fresh })).session!.userId).to.equal(user.userId);
    // Another user's session is not touched.
    expect((await suite.stack.clients.grants.getSession({ sessionToken: other })).session).to.exist;
    const ended = await suite.stack.core.db("audit_records").where({ action: "user.set_status.inactive", subject: user.userId });
    expect(ended.map((r) => r.actor)).to.deep.equal(["admin"]);
  });
});
