import * as grpc from "@grpc/grpc-js";
import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { expectGrpcRefused, expectRefused } from "../../support/refusals.js";
import { softPasskey } from "../../support/soft-passkey.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { fixtures } from "../../support/trust.js";
import { startGrpcCore, type GrpcCore } from "../../support/grpc-core.js";

const GRANTS = "vaultgate.grants.v1.GrantsService";

/**
 * SIGNIN_METHODS is core's decision, not the pages': a caller that goes straight to the
 * core port cannot sign in or step up by a method the deployment leaves out, even with a
 * passkey registered while it was offered, or a provider whose settings are present.
 */
describe("sign-in methods are enforced by core", function () {
  this.timeout(120_000);
  let withPasskeys: TestStack;
  let emailOnly: TestStack;
  let grpcCore: GrpcCore;
  let origin: string;

  before(async () => {
    // Two deployments over one database: the operator has since taken passkeys off the list.
    withPasskeys = await startStack();
    emailOnly = await startStack({
      signinMethods: ["email"],
      // Present but not offered; its address would answer nothing, so only a refusal by method is NOT_FOUND.
      oidc: { issuer: "http://127.0.0.1:9/idp", clientId: "vaultgate", clientSecret: "s".repeat(32), stepUpAcr: [] },
    });
    grpcCore = await startGrpcCore(emailOnly);
    origin = new URL(withPasskeys.issuer).origin;
  });
  after(async () => {
    await grpcCore?.close();
    await emailOnly?.close();
    await withPasskeys?.close();
  });

  async function userWithPasskey() {
    const f = fixtures(withPasskeys);
    const user = await f.user();
    const key = softPasskey();
    const sessionToken = await f.steppedUpSession(user);
    const s = await withPasskeys.clients.grants.startPasskeyRegistration({ sessionToken });
    await withPasskeys.clients.grants.finishPasskeyRegistration({
      sessionToken,
      flowSecret: s.flowSecret,
      responseJson: key.create(s.optionsJson, origin),
      name: "phone",
    });
    return { user, key };
  }

  it("a direct caller gets no passkey ceremony started, for sign-in, step-up or registration", async () => {
    const { user } = await userWithPasskey();
    const sessionToken = await fixtures(emailOnly).steppedUpSession(user);
    await expectGrpcRefused(grpcCore.call(GRANTS, "StartPasskeyAssertion", {}), grpc.status.NOT_FOUND, /passkey is not offered/);
    await expectGrpcRefused(grpcCore.call(GRANTS, "StartPasskeyAssertion", { session_token: sessionToken }), grpc.status.NOT_FOUND, /passkey is not offered/);
    await expectGrpcRefused(grpcCore.call(GRANTS, "StartPasskeyRegistration", { session_token: sessionToken }), grpc.status.NOT_FOUND);
  });

  it("many concurrent answers with a registered passkey sign nobody in once passkeys are off", async () => {
    const { user, key } = await userWithPasskey();
    // Challenges issued while passkeys were offered, answered correctly, then replayed against the core that no longer offers them.
    const flows = await Promise.all(Array.from({ length: 8 }, () => withPasskeys.clients.grants.startPasskeyAssertion({})));
    const results = await Promise.allSettled(
      flows.map((s) => grpcCore.call(GRANTS, "FinishPasskeyAssertion", { flow_secret: s.flowSecret, response_json: key.get(s.optionsJson, origin) })),
    );
    for (const r of results) {
      expect(r.status).to.equal("rejected");
      expect((r as PromiseRejectedResult).reason.code).to.equal(grpc.status.NOT_FOUND);
    }
    // The step-up kind too: a signed-in session cannot be confirmed by that passkey.
    const sessionToken = await fixtures(emailOnly).session(user);
    const s = await withPasskeys.clients.grants.startPasskeyAssertion({ sessionToken });
    await expectRefused(
      emailOnly.clients.grants.finishPasskeyAssertion({ sessionToken, flowSecret: s.flowSecret, responseJson: key.get(s.optionsJson, origin) }),
      Reason.NOT_FOUND,
    );
    expect((await emailOnly.clients.grants.getSession({ sessionToken })).session!.stepUpFresh).to.equal(false);
  });

  it("the provider's sign-in and step-up RPCs answer NOT_FOUND when oidc is not offered, whatever settings exist", async () => {
    const user = await fixtures(emailOnly).user();
    const sessionToken = await fixtures(emailOnly).session(user);
    await expectGrpcRefused(grpcCore.call(GRANTS, "StartProviderSignIn", {}), grpc.status.NOT_FOUND, /not offered/);
    await expectGrpcRefused(grpcCore.call(GRANTS, "StartProviderSignIn", { session_token: sessionToken }), grpc.status.NOT_FOUND, /not offered/);
    await expectRefused(
      emailOnly.clients.grants.completeProviderSignIn({ callbackUrl: `${origin}/signin/oidc/callback?code=x&state=y`, flowSecret: "z".repeat(43) }),
      Reason.NOT_FOUND,
    );
  });
});
