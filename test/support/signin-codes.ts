import type { TestStack } from "./stack.js";
import { formFields, latestCode, type Jar } from "./agent-oauth.js";

/** Asks for a sign-in code in `jar` and returns the code page's form fields and the code e-mailed. */
export async function startChallenge(stack: TestStack, jar: Jar, email: string) {
  const form = formFields(await (await jar.get("/signin")).text(), "/signin");
  const sent = await jar.post("/signin", { ...form, email });
  if (sent.status !== 303) throw new Error(`sign-in start: ${sent.status}`);
  const fields = formFields(await (await jar.get(sent.headers.get("location")!)).text(), "/signin/code");
  // Sends are limited to one per 30 s per account.
  stack.clock.advance(31_000);
  return { fields, code: await latestCode(stack, email).catch(() => "") };
}

/** The i-th six-digit code that is not `code`. */
export const wrongFor = (code: string, i: number) => {
  const w = String((Number(code || "0") + 1 + i) % 1_000_000).padStart(6, "0");
  return w === code ? "999999" : w;
};

/** The "code sign-in paused" notices e-mailed to `email` (dev outbox). */
export const lockoutNotices = async (stack: TestStack, email: string) =>
  (await stack.admin.grants.listOutbox({ email })).messages.filter((m) => /someone tried codes for your account/i.test(m.body));
