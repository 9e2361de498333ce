import { randomUUID } from "node:crypto";
import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { latestCode } from "../../support/agent-oauth.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { expectRefused } from "../../support/refusals.js";

/** Code sign-in for an account whose address was stored under another spelling of the same address. */
describe("Code sign-in for an address stored under an older spelling (GrantsService)", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack();
  });
  after(() => stack.close());

  it("a user stored with the domain's A-label gets the code, typed either way, and signs in", async () => {
    const local = `ada-${randomUUID().slice(0, 8)}`;
    const id = randomUUID();
    await stack.core.db("users").insert({ id, email: `${local}@xn--bcher-kva.example`, status: "active", created_at: new Date() });
    const { challengeId } = await stack.clients.grants.startSignIn({ email: `${local.toUpperCase()}@BÜCHER.example` });
    const code = await latestCode(stack, `${local}@bücher.example`);
    await expectRefused(stack.clients.grants.completeSignIn({ challengeId, code: code === "000000" ? "111111" : "000000" }), Reason.INVALID_GRANT);
    const { sessionToken } = await stack.clients.grants.completeSignIn({ challengeId, code });
    expect((await stack.clients.grants.getSession({ sessionToken })).session!.userId).to.equal(id);
  });

  it("a deactivated user stored under another spelling gets no code", async () => {
    const local = `bo-${randomUUID().slice(0, 8)}`;
    await stack.core.db("users").insert({ id: randomUUID(), email: `${local}@xn--bcher-kva.example`, status: "inactive", created_at: new Date() });
    await stack.clients.grants.startSignIn({ email: `${local}@bücher.example` });
    expect((await stack.admin.grants.listOutbox({ email: `${local}@bücher.example` })).messages).to.deep.equal([]);
  });
});
