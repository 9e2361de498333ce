import { expect } from "chai";
import { Reason } from "../../../gen/vaultgate/common/v1/errors_pb.js";
import { startStack, type TestStack } from "../../support/stack.js";
import { oauthGrant, postForm, verifyReason } from "../../support/agent-oauth.js";
import { basic } from "../../support/partners.js";
import { expectOAuthError } from "../../support/refusals.js";

type Creds = { client_id: string; client_secret: string };

/** RFC 7009 names a lineage by any token of it: an access token past its hour still names its lineage. */
describe("agent OAuth: revoking with an expired access token", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true, publicUrls: true, scrypt: { N: 1024, r: 8, p: 1 } });
  });
  after(() => stack.close());

  const refresh = (client: Creds, refreshToken: string) =>
    postForm(
      `${stack.url}/oauth2/token`,
      { grant_type: "refresh_token", refresh_token: refreshToken },
      { authorization: basic(client.client_id, client.client_secret) },
    );
  const revokeRes = (client: Creds, token: string) =>
    fetch(`${stack.url}/oauth2/revoke`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", authorization: basic(client.client_id, client.client_secret) },
      body: new URLSearchParams({ token, token_type_hint: "access_token" }).toString(),
    });

  it("revokes the lineage it names: the refreshed grant and its refresh token stop working", async () => {
    const { token, client } = await oauthGrant(stack);
    const expired = token.body.access_token as string;
    stack.clock.advance(3700_000);
    expect(await verifyReason(stack, expired)).to.equal(Reason.INVALID_TOKEN);
    const r1 = await refresh(client, token.body.refresh_token as string);
    expect(r1.status).to.equal(200);
    expect(await verifyReason(stack, r1.body.access_token as string)).to.equal("ok");

    expect((await revokeRes(client, expired)).status).to.equal(200);
    expect(await verifyReason(stack, r1.body.access_token as string)).to.equal(Reason.INVALID_TOKEN);
    expect((await refresh(client, r1.body.refresh_token as string)).body.error).to.equal("invalid_grant");
  });

  it("hostile: another client's expired token is refused as a live one is, and revokes nothing", async () => {
    const victim = await oauthGrant(stack);
    const other = await oauthGrant(stack);
    stack.clock.advance(3700_000);
    await expectOAuthError(await revokeRes(other.client, victim.token.body.access_token as string), 400, "invalid_request");
    const r1 = await refresh(victim.client, victim.token.body.refresh_token as string);
    expect(r1.status).to.equal(200);
    // A token with a broken signature names nothing: 200, and the lineage lives on.
    const forged = `${(victim.token.body.access_token as string).slice(0, -4)}AAAA`;
    expect((await revokeRes(victim.client, forged)).status).to.equal(200);
    expect(await verifyReason(stack, r1.body.access_token as string)).to.equal("ok");
  });
});
