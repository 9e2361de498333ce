import * as grpc from "@grpc/grpc-js";
import { Code, ConnectError } from "@connectrpc/connect";
import { expect } from "chai";
import { type ErrorDetail, ErrorDetailSchema, Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { codeOf } from "../../core/errors.js";

/**
 * The one place tests say "this must be refused", one helper per surface (Connect, grpc-js, JSON-RPC,
 * MCP tool results, partner HTTP, OAuth token endpoint); each fails when the call succeeded.
 */

/** What core refused a call with. */
export interface Refusal {
  code: Code;
  reason: Reason;
  detail: ErrorDetail;
  /** The limit a POLICY_DENIED names ("" otherwise). */
  limitName: string;
  message: string;
}

/**
 * What a call that must fail throws, for failures that are not Connect refusals (a third-party
 * client's error, a database refusal, a settings error): awaits `call` or runs it, and fails the
 * test when it succeeds.
 */
export async function thrownBy(call: Promise<unknown> | (() => unknown)): Promise<unknown> {
  try {
    await (typeof call === "function" ? Promise.resolve().then(call) : call);
  } catch (err) {
    return err;
  }
  return expect.fail("expected the call to fail, but it succeeded");
}

/** The same, for a synchronous call. */
export function thrownNow(call: () => unknown): unknown {
  try {
    call();
  } catch (err) {
    return err;
  }
  return expect.fail("expected the call to fail, but it succeeded");
}

/**
 * Awaits a Connect call that must be refused (or runs `fn`, which must throw) and returns the
 * refusal. Fails the test when it succeeded, threw something other than a ConnectError, carried
 * no reason, or carried a code that is not its reason's.
 */
export async function refusalOf(call: Promise<unknown> | (() => unknown)): Promise<Refusal> {
  let thrown: unknown;
  try {
    await (typeof call === "function" ? Promise.resolve().then(call) : call);
  } catch (err) {
    thrown = err;
  }
  if (thrown === undefined) expect.fail("expected the call to be refused, but it succeeded");
  expect(thrown, String(thrown)).to.be.instanceOf(ConnectError);
  const e = thrown as ConnectError;
  const detail = e.findDetails(ErrorDetailSchema)[0];
  expect(detail, `a refusal carries its reason (${Code[e.code]}: ${e.rawMessage})`).to.not.equal(undefined);
  expect(Code[e.code], `the code of ${Reason[detail!.reason]}`).to.equal(Code[codeOf(detail!.reason)]);
  return { code: e.code, reason: detail!.reason, detail: detail!, limitName: detail!.limitName, message: e.rawMessage };
}

/** Asserts a Connect call is refused for `reason` (with that reason's code); returns the refusal. */
export async function expectRefused(call: Promise<unknown> | (() => unknown), reason: Reason, message?: RegExp): Promise<Refusal> {
  const refusal = await refusalOf(call);
  expect(Reason[refusal.reason], refusal.message).to.equal(Reason[reason]);
  if (message) expect(refusal.message).to.match(message);
  return refusal;
}

/** Asserts a Connect call fails as an internal error: Code.Internal, no reason, nothing of the cause in the message. */
export async function expectInternalError(call: Promise<unknown>): Promise<void> {
  let thrown: unknown;
  try {
    await call;
  } catch (err) {
    thrown = err;
  }
  if (thrown === undefined) expect.fail("expected the call to fail, but it succeeded");
  expect(thrown, String(thrown)).to.be.instanceOf(ConnectError);
  const e = thrown as ConnectError;
  expect({ code: Code[e.code], detail: e.findDetails(ErrorDetailSchema)[0], message: e.rawMessage }).to.deep.equal({
    code: "Internal",
    detail: undefined,
    message: "internal error",
  });
}

/** Awaits a raw grpc-js call that must fail and returns its error; fails the test when it succeeded. */
export async function grpcRefusalOf(call: Promise<unknown>): Promise<grpc.ServiceError> {
  let thrown: unknown;
  try {
    await call;
  } catch (err) {
    thrown = err;
  }
  if (thrown === undefined) expect.fail("expected the call to be refused, but it succeeded");
  expect((thrown as grpc.ServiceError).code, String(thrown)).to.be.a("number");
  return thrown as grpc.ServiceError;
}

/** Asserts a raw grpc-js call fails with `status` (compared by name, so a failure reads well). */
export async function expectGrpcRefused(call: Promise<unknown>, status: grpc.status, details?: RegExp): Promise<grpc.ServiceError> {
  const err = await grpcRefusalOf(call);
  expect(statusName(err.code), err.details).to.equal(statusName(status));
  if (details) expect(err.details).to.match(details);
  return err;
}

/** The reason a rejected promise carries (undefined when it is not a refusal): for tallies. */
export const reasonOf = (err: unknown): Reason | undefined => (err instanceof ConnectError ? err.findDetails(ErrorDetailSchema)[0]?.reason : undefined);

export const statusName = (code: number) => grpc.status[code] ?? String(code);

/** A JSON-RPC error object as our MCP endpoints write it. */
export interface JsonRpcError {
  code: number;
  message: string;
  data?: { reason_id?: string; [k: string]: unknown };
}

/**
 * Asserts a JSON-RPC response (`json` parsed, `text` raw) is an error with `code` and
 * `data.reason_id`, and no result; returns the error object.
 */
export function expectJsonRpcError(res: { json?: unknown; text?: string }, code: number, reasonId: string): JsonRpcError {
  const body = res.json as { result?: unknown; error?: JsonRpcError } | undefined;
  expect(body?.error, res.text).to.be.an("object");
  expect(body, res.text).to.not.have.property("result");
  expect({ code: body!.error!.code, reason_id: body!.error!.data?.reason_id }, res.text).to.deep.equal({ code, reason_id: reasonId });
  return body!.error!;
}

/**
 * Asserts an MCP tools/call result (raw JSON-RPC `result` or the SDK's) is a refusal: `isError`,
 * no structuredContent, and the JSON-RPC error it carries in `_meta` has `code`, `reasonId` and,
 * when given, `limit`; returns that error.
 */
export function expectToolError(result: unknown, code: number, reasonId: string, limit?: string): JsonRpcError {
  const text = JSON.stringify(result);
  const r = result as { isError?: unknown; _meta?: { error?: JsonRpcError } } | undefined;
  expect(r?.isError, text).to.equal(true);
  expect(r, text).to.not.have.property("structuredContent");
  const e = r?._meta?.error;
  expect({ code: e?.code, reason_id: e?.data?.reason_id }, text).to.deep.equal({ code, reason_id: reasonId });
  if (limit !== undefined) expect(e!.data?.limit, text).to.equal(limit);
  return e!;
}

/** A response of the partner API (see `api` in ./resources.ts). */
export interface HttpResponse {
  status: number;
  headers: Headers;
  body: unknown;
  text: string;
}

/**
 * Asserts the partner API's exact error envelope: `status`, `{ error: { code, message,
 * request_id } }` with `request_id` equal to X-Request-Id, a Bearer challenge on 401 and
 * Retry-After on 429.
 */
export function expectHttpError(res: HttpResponse, status: number, code: string) {
  expect(res.status, res.text).to.equal(status);
  const body = res.body as { error: { code: string; message: string; request_id: string } };
  expect(Object.keys(body)).to.deep.equal(["error"]);
  expect(Object.keys(body.error).sort()).to.deep.equal(["code", "message", "request_id"]);
  expect(body.error.code).to.equal(code);
  expect(body.error.request_id).to.equal(res.headers.get("x-request-id"));
  if (status === 401) expect(res.headers.get("www-authenticate")).to.match(/^Bearer/);
  if (status === 429) expect(res.headers.get("retry-after")).to.equal("60");
}

/**
 * Asserts an OAuth token endpoint's error response (fetch `Response`): `status`, a body whose
 * `error` is `error`, the no-store headers and a request id; returns the body.
 */
export async function expectOAuthError(res: Response, status: number, error: string): Promise<{ error: string; [k: string]: unknown }> {
  expect(res.status, await res.clone().text()).to.equal(status);
  const body = (await res.json()) as { error: string; [k: string]: unknown };
  expect(body.error).to.equal(error);
  expect(res.headers.get("cache-control")).to.equal("no-store");
  expect(res.headers.get("pragma")).to.equal("no-cache");
  expect(res.headers.get("x-request-id")).to.match(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  return body;
}
