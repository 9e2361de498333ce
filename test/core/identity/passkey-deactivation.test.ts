import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { requirePostgres } from "../../support/db.js";
import { lockWaits } from "../../support/lock-waits.js";
import { expectRefused } from "../../support/refusals.js";
import { softPasskey } from "../../support/soft-passkey.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { fixtures } from "../../support/trust.js";

/** A passkey sign-in racing the operator's deactivation of its user, through GrantsService. */
describe("passkey sign-in and a deactivation", function () {
  this.timeout(60_000);
  let stack: TestStack;
  let f: ReturnType<typeof fixtures>;
  let origin: string;

  before(async () => {
    stack = await startStack();
    f = fixtures(stack);
    origin = new URL(stack.issuer).origin;
  });
  after(async () => {
    await stack?.close();
  });

  /** A user with a passkey registered through GrantsService (a stepped-up session), and the passkey. */
  async function userWithPasskey() {
    const user = await f.user();
    const key = softPasskey();
    const sessionToken = await f.steppedUpSession(user);
    const r = await stack.clients.grants.startPasskeyRegistration({ sessionToken });
    await stack.clients.grants.finishPasskeyRegistration({
      sessionToken,
      flowSecret: r.flowSecret,
      responseJson: key.create(r.optionsJson, origin),
      name: "phone",
    });
    return { user, key };
  }

  it("deactivated and reactivated, the user signs in again with the passkey; the session from before stays ended", async () => {
    const { user, key } = await userWithPasskey();
    const signIn = async () => {
      const s = await stack.clients.grants.startPasskeyAssertion({});
      return stack.clients.grants.finishPasskeyAssertion({ flowSecret: s.flowSecret, responseJson: key.get(s.optionsJson, origin) });
    };
    const before = (await signIn()).sessionToken;
    await stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "inactive" });
    await expectRefused(signIn(), Reason.ACCESS_DENIED);
    await stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "active" });
    await expectRefused(stack.clients.grants.getSession({ sessionToken: before }), Reason.INVALID_TOKEN);
    expect((await stack.clients.grants.getSession({ sessionToken: (await signIn()).sessionToken })).session!.userId).to.equal(user.userId);
  });

  it("PostgreSQL only: a sign-in that read the user just before a deactivation committed is refused, not revived by a reactivation", async function () {
    requirePostgres(this, "a sign-in held mid-way needs a second connection");
    const { user, key } = await userWithPasskey();
    const s = await stack.clients.grants.startPasskeyAssertion({});
    // Audit rows wait: the deactivation has ended the sessions when it stops at its own, the sign-in has read the user.
    const hold = await stack.core.db.transaction();
    await hold.raw("LOCK TABLE audit_records IN SHARE MODE");
    const deactivated = stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "inactive" });
    await lockWaits(stack.core.db, "audit_records", 1);
    // Checked from the start: its refusal arrives while the test awaits the deactivation.
    const finished = expectRefused(
      stack.clients.grants.finishPasskeyAssertion({ flowSecret: s.flowSecret, responseJson: key.get(s.optionsJson, origin) }),
      Reason.ACCESS_DENIED,
    );
    await lockWaits(stack.core.db, "", 2);
    await hold.commit();
    await deactivated;
    await finished;
    await stack.admin.partnerResources.setUserStatus({ userId: user.userId, status: "active" });
    expect(await stack.core.db("web_sessions").where({ user_id: user.userId }).whereNull("ended_at")).to.have.length(0);
  });
});
