import { createHash, randomBytes } from "node:crypto";
import { ConnectError } from "@connectrpc/connect";
import { ErrorDetailSchema, type Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { basic } from "./partners.js";
import { refusalOf } from "./refusals.js";
import type { TestStack } from "./stack.js";

/** A tiny browser: cookies kept per name, redirects followed by hand. */
export function createJar(base: string) {
  const cookies = new Map<string, string>();
  async function request(path: string, init: RequestInit = {}): Promise<Response> {
    const url = path.startsWith("http") ? path : base + path;
    const headers = new Headers(init.headers);
    if (cookies.size) headers.set("cookie", [...cookies].map(([k, v]) => `${k}=${v}`).join("; "));
    const res = await fetch(url, { ...init, headers, redirect: "manual" });
    for (const line of res.headers.getSetCookie()) {
      const [pair, ...attrs] = line.split(";");
      const eq = pair!.indexOf("=");
      const name = pair!.slice(0, eq).trim();
      const value = pair!.slice(eq + 1).trim();
      if (attrs.some((a) => /max-age=0/i.test(a.trim())) || value === "") cookies.delete(name);
      else cookies.set(name, value);
    }
    return res;
  }
  return {
    cookies,
    request,
    get: (path: string) => request(path),
    post: (path: string, form: Record<string, string | string[]>) => {
      const body = new URLSearchParams();
      for (const [k, v] of Object.entries(form)) for (const x of Array.isArray(v) ? v : [v]) body.append(k, x);
      return request(path, { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: body.toString() });
    },
  };
}
export type Jar = ReturnType<typeof createJar>;

/** The hidden fields of the first form on a page whose action matches. */
export function formFields(htmlText: string, action: string): Record<string, string | string[]> {
  const start = htmlText.indexOf(`action="${action}"`);
  if (start === -1) throw new Error(`no form posting to ${action}`);
  const end = htmlText.indexOf("</form>", start);
  const chunk = htmlText.slice(start, end);
  const out: Record<string, string | string[]> = {};
  for (const m of chunk.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) {
    const value = unescapeHtml(m[2]!);
    const prev = out[m[1]!];
    out[m[1]!] = prev === undefined ? value : [...(Array.isArray(prev) ? prev : [prev]), value];
  }
  return out;
}

function unescapeHtml(s: string): string {
  return s
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&lt;/g, "<")
    .replace(/&gt;/g, ">")
    .replace(/&amp;/g, "&");
}

export async function createUser(stack: TestStack) {
  const email = `u-${randomBytes(5).toString("hex")}@example.com`;
  const res = await stack.admin.partners.createUser({ email });
  return { email, userId: res.userId, vaultId: res.vaultId };
}

/** The newest one-time code e-mailed to `email` (dev outbox). */
export async function latestCode(stack: TestStack, email: string): Promise<string> {
  const { messages } = await stack.admin.grants.listOutbox({ email });
  const m = /\b(\d{6})\b/.exec(messages[0]?.subject ?? "");
  if (!m) throw new Error(`no code for ${email}`);
  return m[1]!;
}

/**
 * Codes are e-mailed at most once per 30 s per account and purpose: a helper that needs
 * another one sooner lets the test clock pass the wait (only then), and sends again.
 */
export async function afterSendGap<T>(stack: Partial<Pick<TestStack, "clock">>, send: () => Promise<T>): Promise<T> {
  try {
    const res = await send();
    const wait = res instanceof Response && res.status === 429 ? Number(res.headers.get("retry-after")) : 0;
    if (!(wait > 0 && wait <= 30)) return res;
    if (!stack.clock) throw new Error(`sign-in code sends are limited: wait ${wait} s`);
    stack.clock.advance(wait * 1000);
  } catch (err) {
    const wait = err instanceof ConnectError ? (err.findDetails(ErrorDetailSchema)[0]?.retryAfterSeconds ?? 0) : 0;
    if (!(wait > 0 && wait <= 30)) throw err;
    if (!stack.clock) throw new Error(`sign-in code sends are limited: wait ${wait} s`);
    stack.clock.advance(wait * 1000);
  }
  return send();
}

/** Signs in over HTTP through the real pages; follows to `returnTo`. */
export async function signIn(stack: TestStack, jar: Jar, email: string, returnTo = "/dashboard/agents"): Promise<Response> {
  const form = await jar.get(`/signin?return_to=${encodeURIComponent(returnTo)}`);
  const fields = formFields(await form.text(), "/signin");
  const sent = await afterSendGap(stack, () => jar.post("/signin", { ...fields, email }));
  if (sent.status !== 303) throw new Error(`sign-in start: ${sent.status}`);
  const codePage = await jar.get(sent.headers.get("location")!);
  const codeFields = formFields(await codePage.text(), "/signin/code");
  const done = await jar.post("/signin/code", { ...codeFields, code: await latestCode(stack, email) });
  if (done.status !== 303) throw new Error(`sign-in code: ${done.status} ${await done.text()}`);
  return done;
}

/** Steps up over HTTP (the step-up page at `location`), returning the redirect back. */
export async function stepUp(stack: TestStack, jar: Jar, email: string, location: string): Promise<Response> {
  const pageRes = await jar.get(location);
  const fields = formFields(await pageRes.text(), "/stepup");
  const sent = await afterSendGap(stack, () => jar.post("/stepup", fields));
  const codePage = await jar.get(sent.headers.get("location")!);
  const codeFields = formFields(await codePage.text(), "/stepup/code");
  return jar.post("/stepup/code", { ...codeFields, code: await latestCode(stack, email) });
}

export function pkce() {
  const verifier = randomBytes(32).toString("base64url");
  const challenge = createHash("sha256").update(verifier).digest("base64url");
  return { verifier, challenge };
}

export async function registerClient(stack: TestStack, body: Record<string, unknown> = {}) {
  const res = await fetch(`${stack.url}/oauth2/register`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      client_name: "Test agent",
      redirect_uris: ["http://127.0.0.1:9/callback"],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: "client_secret_post",
      scope: "accounts:read payments:initiate payments:simulate audit:stream",
      ...body,
    }),
  });
  return { status: res.status, headers: res.headers, body: (await res.json()) as Record<string, unknown> & { client_id: string; client_secret: string } };
}

/**
 * Runs authorize -> (sign-in) -> (step-up) -> consent -> approve over HTTP and returns
 * the final redirect URL to the client.
 */
export async function authorize(
  stack: TestStack,
  jar: Jar,
  email: string,
  query: Record<string, string | string[]>,
  decide: "approve" | "deny" = "approve",
): Promise<URL> {
  const sp = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) for (const x of Array.isArray(v) ? v : [v]) sp.append(k, x);
  let res = await jar.get(`/oauth2/authorize?${sp}`);
  for (let hops = 0; hops < 10; hops++) {
    if (res.status === 303) {
      const loc = res.headers.get("location")!;
      if (!loc.startsWith("/")) return new URL(loc);
      if (loc.startsWith("/signin")) res = await signIn(stack, jar, email, new URL(loc, stack.url).searchParams.get("return_to")!);
      else if (loc.startsWith("/stepup")) res = await stepUp(stack, jar, email, loc);
      else res = await jar.get(loc);
      continue;
    }
    const text = await res.text();
    if (res.status !== 200) throw new Error(`authorize: ${res.status} ${text.slice(0, 300)}`);
    const fields = formFields(text, "/oauth2/authorize/decision");
    // The user picks the first vault when the request did not name one.
    if (!fields.vault_id) fields.vault_id = /name="vault_id" value="([^"]+)"/.exec(text)![1]!;
    res = await jar.post("/oauth2/authorize/decision", { ...fields, decision: decide });
  }
  throw new Error("authorize: too many hops");
}

export async function postForm(url: string, form: Record<string, string>, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
    body: new URLSearchParams(form).toString(),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

/** The redirect URI the agent OAuth suites register. */
export const REDIRECT = "http://127.0.0.1:9/callback";

/** The resource indicator naming a vault. */
export const vaultUrn = (vaultId: string) => `urn:vaultgate:vault:${vaultId}`;

/** What core says of an access token: "ok", or the reason it refuses it. */
export async function verifyReason(stack: TestStack, accessToken: string): Promise<Reason | "ok"> {
  const call = stack.clients.grants.verifyAgentToken({ accessToken });
  const accepted = await call.then(() => true).catch(() => false);
  if (accepted) return "ok";
  return (await refusalOf(call)).reason;
}

/** Registration, then sign-in and consent as `user` in `jar`: the code, not yet exchanged, and what its exchange needs. */
export async function consentCode(
  stack: TestStack,
  user: { email: string; vaultId: string },
  jar: Jar,
  opts: { scope?: string; resource?: string[]; register?: Record<string, unknown> } = {},
) {
  const client = (await registerClient(stack, opts.register)).body;
  const { verifier, challenge } = pkce();
  const back = await authorize(stack, jar, user.email, {
    response_type: "code",
    client_id: client.client_id,
    redirect_uri: REDIRECT,
    code_challenge: challenge,
    code_challenge_method: "S256",
    scope: opts.scope ?? "accounts:read",
    resource: opts.resource ?? [vaultUrn(user.vaultId)],
    state: "st-1",
  });
  return { client, back, code: back.searchParams.get("code")!, verifier };
}

/** The token request that exchanges `code` (client_secret_post), with any `extra` fields. */
export function codeExchangeForm(
  c: { client: { client_id: string; client_secret: string }; code: string; verifier: string },
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    grant_type: "authorization_code",
    code: c.code,
    redirect_uri: REDIRECT,
    code_verifier: c.verifier,
    client_id: c.client.client_id,
    client_secret: c.client.client_secret,
    ...extra,
  };
}

/** Registration, sign-in, consent and code exchange; returns everything a test needs. */
export async function oauthGrant(
  stack: TestStack,
  opts: { scope?: string; resource?: string[]; auth?: "post" | "basic"; register?: Record<string, unknown> } = {},
) {
  const user = await createUser(stack);
  const jar = createJar(stack.url);
  const { client, back, code, verifier } = await consentCode(stack, user, jar, opts);
  const form = { grant_type: "authorization_code", code, redirect_uri: REDIRECT, code_verifier: verifier };
  const token =
    opts.auth === "basic"
      ? await postForm(`${stack.url}/oauth2/token`, form, { authorization: basic(client.client_id, client.client_secret) })
      : await postForm(`${stack.url}/oauth2/token`, { ...form, client_id: client.client_id, client_secret: client.client_secret });
  return { user, client, jar, back, code, verifier, token };
}
