import { expect } from "chai";
import { startStack, type TestStack } from "../../support/stack.js";
import { createJar, createUser, formFields, signIn } from "../../support/agent-oauth.js";

/** Where a page goes back to after sign-in or step-up: a path on this origin, or the dashboard. */
describe("web pages: return_to", () => {
  let stack: TestStack;
  before(async () => {
    stack = await startStack({ gateway: true });
  });
  after(() => stack.close());

  const kept = async (value: string) => {
    const page = await createJar(stack.url).get(`/signin?return_to=${encodeURIComponent(value)}`);
    expect(page.status).to.equal(200);
    return formFields(await page.text(), "/signin").return_to;
  };

  it("hostile: another origin in any spelling, dot segments included, falls back to the dashboard", async () => {
    const hostile = [
      "https://evil.example/",
      "//evil.example",
      "///evil.example",
      "/\\evil.example",
      "\\\\evil.example",
      "/\t/evil.example",
      "http:evil.example",
      "/.//evil.example",
      "/..//evil.example",
      "/x/../..//evil.example",
      "/%2e//evil.example",
      "/%2E%2E//evil.example",
      "/.%2e//evil.example",
    ];
    const answers = await Promise.all(hostile.map(kept));
    expect(Object.fromEntries(hostile.map((v, i) => [v, answers[i]]))).to.deep.equal(Object.fromEntries(hostile.map((v) => [v, "/dashboard/agents"])));
  });

  it("paths of this origin are kept as given, escapes and all", async () => {
    const fine = [
      "/dashboard/money",
      "/oauth2/authorize?client_id=a&state=%2F%2Fx",
      "/dashboard/money#v-1",
      "/%2F%2Fevil.example",
      "/%5Cevil.example",
      "/@evil.example",
    ];
    expect(await Promise.all(fine.map(kept))).to.deep.equal(fine);
  });

  it("a sign-in asked to return to /.//evil.example lands on the dashboard, not on a path a browser reads as //evil.example", async () => {
    const user = await createUser(stack);
    const done = await signIn(stack, createJar(stack.url), user.email, "/.//evil.example");
    expect(done.headers.get("location")).to.equal("/dashboard/agents");
  });
});
