import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { requirePostgres } from "../../support/db.js";
import { lockWaits } from "../../support/lock-waits.js";
import { expectRefused } from "../../support/refusals.js";
import { softPasskey, type SoftPasskey } from "../../support/soft-passkey.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { fixtures, type TestUser } from "../../support/trust.js";

/**
 * The passkey RPCs as the dashboard calls them (real serialization), with a software
 * authenticator: a challenge answers once however many callers race for it, a passkey
 * steps up only its owner's session, and malformed browser answers are bad input.
 */
describe("passkey RPCs: registration, step-up and sign-in through GrantsService", function () {
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

  async function withPasskey(): Promise<{ user: TestUser; key: SoftPasskey; passkeyId: string }> {
    const user = await f.user();
    const key = softPasskey();
    const sessionToken = await f.steppedUpSession(user);
    const s = await stack.clients.grants.startPasskeyRegistration({ sessionToken });
    const r = await stack.clients.grants.finishPasskeyRegistration({
      sessionToken,
      flowSecret: s.flowSecret,
      responseJson: key.create(s.optionsJson, origin),
      name: "phone",
    });
    return { user, key, passkeyId: r.passkey!.passkeyId };
  }

  it("a passkey assertion is the fresh step-up of the session it was started in", async () => {
    const { user, key } = await withPasskey();
    const sessionToken = await f.session(user);
    expect((await stack.clients.grants.getSession({ sessionToken })).session!.stepUpFresh).to.equal(false);
    const s = await stack.clients.grants.startPasskeyAssertion({ sessionToken });
    await stack.clients.grants.finishPasskeyAssertion({ sessionToken, flowSecret: s.flowSecret, responseJson: key.get(s.optionsJson, origin) });
    expect((await stack.clients.grants.getSession({ sessionToken })).session!.stepUpFresh).to.equal(true);
  });

  it("a passkey sign-in ends the session the browser held before and marks the browser", async () => {
    const { user, key } = await withPasskey();
    const old = await f.session(user);
    const s = await stack.clients.grants.startPasskeyAssertion({});
    const done = await stack.clients.grants.finishPasskeyAssertion({
      flowSecret: s.flowSecret,
      responseJson: key.get(s.optionsJson, origin),
      replacesSessionToken: old,
    });
    await expectRefused(stack.clients.grants.getSession({ sessionToken: old }), Reason.INVALID_TOKEN);
    expect((await stack.clients.grants.getSession({ sessionToken: done.sessionToken })).session!.userId).to.equal(user.userId);
    expect(done.browserToken).to.match(/^vgb_/);
  });

  it("many concurrent answers to one challenge: exactly one signs in", async () => {
    const { key } = await withPasskey();
    const s = await stack.clients.grants.startPasskeyAssertion({});
    const answers = Array.from({ length: 12 }, () => key.get(s.optionsJson, origin));
    const results = await Promise.allSettled(
      answers.map((responseJson) => stack.clients.grants.finishPasskeyAssertion({ flowSecret: s.flowSecret, responseJson })),
    );
    expect(results.filter((r) => r.status === "fulfilled")).to.have.length(1);
  });

  it("many concurrent registrations of one flow store one passkey", async () => {
    const user = await f.user();
    const sessionToken = await f.steppedUpSession(user);
    const s = await stack.clients.grants.startPasskeyRegistration({ sessionToken });
    const results = await Promise.allSettled(
      Array.from({ length: 10 }, () =>
        stack.clients.grants.finishPasskeyRegistration({
          sessionToken,
          flowSecret: s.flowSecret,
          responseJson: softPasskey().create(s.optionsJson, origin),
          name: "x",
        }),
      ),
    );
    expect(results.filter((r) => r.status === "fulfilled")).to.have.length(1);
    expect((await stack.clients.grants.listPasskeys({ sessionToken })).passkeys).to.have.length(1);
  });

  it("refuses an answer made for another origin, and registration without a fresh step-up", async () => {
    const { user, key } = await withPasskey();
    const s = await stack.clients.grants.startPasskeyAssertion({});
    await expectRefused(
      stack.clients.grants.finishPasskeyAssertion({ flowSecret: s.flowSecret, responseJson: key.get(s.optionsJson, "https://evil.example") }),
      Reason.ACCESS_DENIED,
    );
    const plain = await f.session(user);
    await expectRefused(stack.clients.grants.startPasskeyRegistration({ sessionToken: plain }), Reason.ACCESS_DENIED);
  });

  it("another person cannot remove or see someone's passkey", async () => {
    const { user, passkeyId } = await withPasskey();
    const other = await f.steppedUpSession(await f.user());
    await expectRefused(stack.clients.grants.removePasskey({ sessionToken: other, passkeyId }), Reason.NOT_FOUND);
    expect((await stack.clients.grants.listPasskeys({ sessionToken: other })).passkeys).to.deep.equal([]);
    const mine = await f.session(user);
    expect((await stack.clients.grants.listPasskeys({ sessionToken: mine })).passkeys.map((k) => k.passkeyId)).to.deep.equal([passkeyId]);
  });

  it("PostgreSQL only: a passkey removed while a sign-in with it is under way refuses that sign-in as removed, not as a clone", async function () {
    requirePostgres(this, "a sign-in held mid-way needs a second connection");
    const { user, key, passkeyId } = await withPasskey();
    const owner = await f.steppedUpSession(user);
    const s = await stack.clients.grants.startPasskeyAssertion({});
    // The passkey's row held: the removal queues for it first, then the sign-in's use of it.
    const hold = await stack.core.db.transaction();
    await hold.raw("SELECT 1 FROM passkeys WHERE id = ? FOR UPDATE", [passkeyId]);
    const removed = stack.clients.grants.removePasskey({ sessionToken: owner, passkeyId });
    await lockWaits(stack.core.db, "passkeys", 1);
    const signIn = expectRefused(
      stack.clients.grants.finishPasskeyAssertion({ flowSecret: s.flowSecret, responseJson: key.get(s.optionsJson, origin) }),
      Reason.ACCESS_DENIED,
    );
    await lockWaits(stack.core.db, "passkeys", 2);
    await hold.commit();
    await removed;
    await signIn;
    const actions = (await stack.core.db("audit_records").where({ actor: `user:${user.userId}` })).map((r: { action: string }) => r.action);
    expect(actions).to.include("passkey.remove");
    expect(actions).not.to.include("passkey.clone_suspected");
    expect(stack.logs.text()).not.to.include("possible cloned authenticator");
  });

  it("hostile: a passkey id that only looks like a UUID is not found, not an internal error, and removes nothing", async () => {
    const { user, passkeyId } = await withPasskey();
    const sessionToken = await f.steppedUpSession(user);
    for (const id of ["-".repeat(36), `${"f".repeat(35)}-`, passkeyId.replace(/-/g, "0")]) {
      await expectRefused(stack.clients.grants.removePasskey({ sessionToken, passkeyId: id }), Reason.NOT_FOUND);
    }
    expect((await stack.clients.grants.listPasskeys({ sessionToken })).passkeys.map((k) => k.passkeyId)).to.deep.equal([passkeyId]);
  });

  it("a NUL escaped in a browser answer's JSON is bad input, not an internal error, and spends no challenge", async () => {
    const { user, key } = await withPasskey();
    const s = await stack.clients.grants.startPasskeyAssertion({});
    const withNul = { ...JSON.parse(key.get(s.optionsJson, origin)), id: "a\u0000b" };
    await expectRefused(
      stack.clients.grants.finishPasskeyAssertion({ flowSecret: s.flowSecret, responseJson: JSON.stringify(withNul) }),
      Reason.INVALID_REQUEST,
      /NUL/,
    );
    const done = await stack.clients.grants.finishPasskeyAssertion({ flowSecret: s.flowSecret, responseJson: key.get(s.optionsJson, origin) });
    expect((await stack.clients.grants.getSession({ sessionToken: done.sessionToken })).session!.userId).to.equal(user.userId);

    // Registration: the browser's transports are stored as given.
    const sessionToken = await f.steppedUpSession(user);
    const r = await stack.clients.grants.startPasskeyRegistration({ sessionToken });
    const created = JSON.parse(softPasskey().create(r.optionsJson, origin));
    created.response.transports = ["usb\u0000"];
    await expectRefused(
      stack.clients.grants.finishPasskeyRegistration({ sessionToken, flowSecret: r.flowSecret, responseJson: JSON.stringify(created), name: "x" }),
      Reason.INVALID_REQUEST,
      /NUL/,
    );
  });

  it("hostile: a registration whose unsigned transports are not a list of strings keeps only its strings, and breaks nothing", async () => {
    for (const [given, kept] of [
      [5, []],
      ["usb", []],
      [{ usb: true }, []],
      [[["usb"]], []],
      [
        [1, null, "nfc", {}, "usb"],
        ["nfc", "usb"],
      ],
    ] as const) {
      const user = await f.user();
      const sessionToken = await f.steppedUpSession(user);
      const r = await stack.clients.grants.startPasskeyRegistration({ sessionToken });
      const created = JSON.parse(softPasskey().create(r.optionsJson, origin));
      created.response.transports = given;
      await stack.clients.grants.finishPasskeyRegistration({ sessionToken, flowSecret: r.flowSecret, responseJson: JSON.stringify(created), name: "x" });
      const s = await stack.clients.grants.startPasskeyAssertion({ sessionToken });
      expect(
        JSON.parse(s.optionsJson).allowCredentials.map((c: { transports: string[] }) => c.transports),
        JSON.stringify(given),
      ).to.deep.equal([kept]);
    }
    // Everyone else's calls still work afterwards.
    const other = await f.session(await f.user());
    expect((await stack.clients.grants.listPasskeys({ sessionToken: other })).passkeys).to.deep.equal([]);
  });

  it("malformed browser answers are bad input", async () => {
    const s = await stack.clients.grants.startPasskeyAssertion({});
    for (const responseJson of ["", "not json", "[]", "{}", JSON.stringify({ id: 1, response: {} }), "x".repeat(70_000)]) {
      await expectRefused(stack.clients.grants.finishPasskeyAssertion({ flowSecret: s.flowSecret, responseJson }), Reason.INVALID_REQUEST);
    }
  });
});
