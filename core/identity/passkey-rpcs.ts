import type { HandlerContext } from "@connectrpc/connect";
import type {
  FinishPasskeyAssertionRequest,
  FinishPasskeyRegistrationRequest,
  ListPasskeysRequest,
  RemovePasskeyRequest,
  StartPasskeyAssertionRequest,
  StartPasskeyRegistrationRequest,
} from "../../gen/vaultgate/grants/v1/signin_pb.js";
import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { callFacts } from "../context.js";
import { fail } from "../errors.js";
import { jsonTextProblem } from "../../lib/text.js";
import { limitFlowStart, limitSessionFlowStart, type FlowStartLimit } from "./flow-starts.js";
import type { PasskeyRecord, Passkeys } from "./passkeys.js";
import type { KnownBrowsers } from "./known-browsers.js";
import type { SessionVerifier } from "./sessions.js";

export interface PasskeyRpcDeps {
  passkeys: Passkeys;
  sessions: SessionVerifier;
  /** Completing a sign-in marks the browser as known (core/identity/known-browsers.ts). */
  browsers: KnownBrowsers;
  /** Starts are limited per session, and without one per client address (core/identity/flow-starts.ts). */
  flowStarts: FlowStartLimit;
}

const seconds = (d: Date | null) => (d ? BigInt(Math.floor(d.getTime() / 1000)) : 0n);
const toProto = (k: PasskeyRecord) => ({
  passkeyId: k.id,
  name: k.name,
  createdAt: seconds(k.createdAt),
  lastUsedAt: seconds(k.lastUsedAt),
  backedUp: k.backedUp,
  deviceType: k.deviceType,
});

/** The browser's JSON, bounded and parsed; anything else is bad input, never a 5xx. */
function browserJson(raw: string, field: string): never | Record<string, unknown> {
  if (!raw || raw.length > 64 * 1024) fail(Reason.INVALID_REQUEST, `${field} is missing or too long`);
  let v: unknown;
  try {
    v = JSON.parse(raw);
  } catch {
    fail(Reason.INVALID_REQUEST, `${field} is not JSON`);
  }
  // Its strings reach PostgreSQL (the credential id, the transports): a NUL escaped in the JSON
  // is refused as the input guard refuses a raw one, before any challenge is spent.
  const bad = jsonTextProblem(v);
  if (bad) fail(Reason.INVALID_REQUEST, `${field} ${bad}`);
  if (!v || typeof v !== "object" || Array.isArray(v)) fail(Reason.INVALID_REQUEST, `${field} must be a JSON object`);
  const o = v as Record<string, unknown>;
  if (typeof o.id !== "string" || typeof o.response !== "object" || !o.response) fail(Reason.INVALID_REQUEST, `${field} is not a WebAuthn credential`);
  return o;
}

/** GrantsService.StartPasskeyRegistration: creation options, only after a fresh step-up. */
export async function startPasskeyRegistration(deps: PasskeyRpcDeps, req: StartPasskeyRegistrationRequest) {
  const s = await deps.sessions.verify(req.sessionToken);
  const r = await limitSessionFlowStart(deps.flowStarts, s, () => deps.passkeys.registrationOptions(s));
  return { optionsJson: JSON.stringify(r.options), flowSecret: r.binding };
}

/** GrantsService.FinishPasskeyRegistration: the authenticator's answer, verified and stored. */
export async function finishPasskeyRegistration(deps: PasskeyRpcDeps, req: FinishPasskeyRegistrationRequest, ctx: HandlerContext) {
  const s = await deps.sessions.verify(req.sessionToken);
  const response = browserJson(req.responseJson, "response_json");
  if (req.name.length > 200) fail(Reason.INVALID_REQUEST, "name is too long");
  const k = await deps.passkeys.register({ binding: req.flowSecret, response: response as never, name: req.name, session: s }, callFacts(ctx));
  return { passkey: toProto(k) };
}

/** GrantsService.ListPasskeys: the session user's passkeys. */
export async function listPasskeys(deps: PasskeyRpcDeps, req: ListPasskeysRequest) {
  const s = await deps.sessions.verify(req.sessionToken);
  return { passkeys: (await deps.passkeys.list(s.userId)).map(toProto) };
}

/** GrantsService.RemovePasskey: one of the session user's own passkeys. */
export async function removePasskey(deps: PasskeyRpcDeps, req: RemovePasskeyRequest, ctx: HandlerContext) {
  const s = await deps.sessions.verify(req.sessionToken);
  await deps.passkeys.remove(s, req.passkeyId, callFacts(ctx));
  return {};
}

/** GrantsService.StartPasskeyAssertion: step-up options with a session, sign-in options without. */
export async function startPasskeyAssertion(deps: PasskeyRpcDeps, req: StartPasskeyAssertionRequest, ctx: HandlerContext) {
  const s = req.sessionToken ? await deps.sessions.verify(req.sessionToken) : undefined;
  const r = await limitFlowStart(deps.flowStarts, ctx, s, (purpose, session) => deps.passkeys.authenticationOptions(purpose, session));
  return { optionsJson: JSON.stringify(r.options), flowSecret: r.binding };
}

/** GrantsService.FinishPasskeyAssertion: a session for sign-in, or a fresh step-up on the given session. */
export async function finishPasskeyAssertion(deps: PasskeyRpcDeps, req: FinishPasskeyAssertionRequest, ctx: HandlerContext) {
  const s = req.sessionToken ? await deps.sessions.verify(req.sessionToken) : undefined;
  const response = browserJson(req.responseJson, "response_json");
  const done = await deps.passkeys.authenticate(
    {
      binding: req.flowSecret,
      response: response as never,
      session: s ? { sessionId: s.sessionId, userId: s.userId } : undefined,
      replaces: req.replacesSessionToken,
    },
    callFacts(ctx),
  );
  if (done.purpose === "sign_in") return { sessionToken: done.sessionToken, expiresIn: BigInt(done.expiresIn), browserToken: deps.browsers.issue(done.userId) };
  return { sessionToken: "", expiresIn: 0n };
}
