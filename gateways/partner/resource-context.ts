import type { FastifyInstance, FastifyReply, FastifyRequest } from "fastify";
import { findBadText } from "../shared/text.js";
import { refuseEncodedBodies } from "../shared/content-encoding.js";
import { jsonTooDeep, TOO_DEEP } from "../shared/json-depth.js";
import { inexactAsNaN, markInexactNumbers } from "../shared/json-numbers.js";
import { repeatedMember, repeatedMemberMessage } from "../shared/json-members.js";
import { invalidRequest, ResourceError, resourceErrorFrom, sendResourceError } from "./resource-envelope.js";
import { noteRefusal } from "../request-log.js";
import { UUID } from "../../lib/uuid.js";
import { sendTokenMethodNotAllowed, TOKEN_PATH } from "./token-route.js";
import { dropEmptyContentType } from "./content-type.js";
import { hasMalformedPath, MALFORMED_PATH } from "./malformed-path.js";
import { NOT_UTF8, NOT_UTF8_MESSAGE, utf8Text } from "../shared/utf8.js";

/** A NUL or lone surrogate found in a request's query or path, refused with its shape. */
const badParamText = new WeakMap<FastifyRequest, string>();

/** Refuses a query or path holding text no store can keep; every shape check starts here. */
export function paramsAreText(request: FastifyRequest) {
  const problem = badParamText.get(request);
  if (problem) throw invalidRequest(problem);
}

/** Marker body for a request whose content type is not JSON. */
const NOT_JSON = Symbol("not-json");

/** Stands in for a JSON body holding NUL or a lone surrogate, so no route can read its values. */
class BadBodyText {
  constructor(readonly message: string) {}
}

/**
 * Makes an encapsulated fastify context speak the resource envelope (its own JSON parser, error
 * and not-found handlers), so the resource and treasury routes share one envelope.
 */
export function installResourceContext(app: FastifyInstance, options: { notFoundHandler?: boolean } = {}) {
  app.addHook(
    "onRequest",
    refuseEncodedBodies((message) => new ResourceError(415, "unsupported_media_type", message)),
  );
  app.addHook("onRequest", dropEmptyContentType);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("application/json", { parseAs: "buffer" }, (_req, body, done) => {
    const text = utf8Text(body as Buffer);
    if (text === NOT_UTF8) return done(new ResourceError(400, "invalid_json", NOT_UTF8_MESSAGE), undefined);
    if (text.trim() === "") return done(new ResourceError(400, "invalid_json", "request body is not valid JSON"), undefined);
    if (jsonTooDeep(text)) return done(new ResourceError(400, "invalid_json", TOO_DEEP), undefined);
    let parsed: unknown;
    try {
      const marked = markInexactNumbers(text);
      parsed = marked === text ? JSON.parse(text) : JSON.parse(marked, inexactAsNaN);
    } catch {
      return done(new ResourceError(400, "invalid_json", "request body is not valid JSON"), undefined);
    }
    const repeated = repeatedMember(text);
    if (repeated !== undefined) return done(new ResourceError(400, "invalid_json", repeatedMemberMessage(repeated)), undefined);
    // Bad text is part of the request's shape, like a wrong type: refused once core has checked the caller.
    const badText = findBadText(parsed);
    done(null, badText ? new BadBodyText(badText.message) : parsed);
  });
  // Query and path parameters obey the same text rules as the body, refused in the same place.
  app.addHook("preValidation", (request, _reply, done) => {
    if (hasMalformedPath(request)) badParamText.set(request, MALFORMED_PATH);
    const badText = badParamText.has(request) ? undefined : (findBadText(request.query, "", "the query string") ?? findBadText(request.params, "", "the path"));
    if (badText) badParamText.set(request, badText.message);
    done();
  });
  app.addContentTypeParser("*", { parseAs: "string" }, (_req, _body, done) => done(null, NOT_JSON));

  app.setErrorHandler((err: unknown, request, reply) => {
    noteRefusal(request, err);
    const e = resourceErrorFrom(err);
    // A database outage (temporarily_unavailable) was logged once by core, at warn.
    if (e.status >= 500 && e.code !== "temporarily_unavailable") request.log.error({ err }, "partner resource failure");
    return sendResourceError(request, reply, e);
  });
  // fastify allows one not-found handler per prefix: a second context under the same
  // prefix (the treasury routes) passes notFoundHandler: false and shares this one.
  if (options.notFoundHandler !== false) {
    app.setNotFoundHandler((request, reply) => {
      const allowed = app.allowedMethods(request.url).join(", ");
      if (!allowed) return sendResourceError(request, reply, { status: 404, code: "not_found", message: "no such endpoint" });
      if (request.url.split("?", 1)[0] === `${app.prefix}${TOKEN_PATH}`) return sendTokenMethodNotAllowed(reply, allowed);
      return sendResourceError(request, reply.header("allow", allowed), {
        status: 405,
        code: "method_not_allowed",
        message: `this endpoint answers ${allowed} only`,
      });
    });
  }
}

/**
 * onSend hook: partner answers are never cached (every response, errors included). In
 * callback style: an async hook costs a promise and a microtask turn per response.
 */
export function noStore(_request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: null, payload: unknown) => void): void {
  reply.header("cache-control", "no-store");
  done(null, payload);
}

/** The JSON body as an object, refusing non-JSON content types and non-object bodies. */
export function jsonObjectBody(request: FastifyRequest, optional = false): Record<string, unknown> {
  const body = request.body as unknown;
  if (body === undefined) {
    if (optional) return {};
    throw new ResourceError(400, "invalid_request", "a JSON body is required");
  }
  if (body === NOT_JSON) throw new ResourceError(400, "invalid_request", "content type must be application/json");
  if (body instanceof BadBodyText) throw invalidRequest(body.message);
  // A sent `null` is a body, and no object: an optional body may be left out, never null.
  if (body === null || typeof body !== "object" || Array.isArray(body)) throw new ResourceError(400, "invalid_request", "the body must be a JSON object");
  return body as Record<string, unknown>;
}

/** Refuses any field outside `allowed` (strict validation). */
export function onlyFields(body: Record<string, unknown>, allowed: string[]) {
  const unknown = Object.keys(body).filter((k) => !allowed.includes(k));
  if (unknown.length > 0) throw new ResourceError(400, "invalid_request", `unknown field: ${unknown[0]}`);
}

/** Refuses any query parameter (the routes that take none). */
export function noQuery(request: FastifyRequest) {
  paramsAreText(request);
  const keys = Object.keys((request.query ?? {}) as Record<string, unknown>);
  if (keys.length > 0) throw invalidRequest(`unknown query parameter: ${keys[0]}`);
}

/** The outcome of the gateway's shape checks: the values, or the problem core refuses once it has checked the caller. */
type Shape<T> = { value: T; problem: "" } | { value: undefined; problem: string };

export function checkShape<T>(check: () => T): Shape<T> {
  try {
    return { value: check(), problem: "" };
  } catch (err) {
    if (err instanceof ResourceError && err.code === "invalid_request") return { value: undefined, problem: err.message };
    throw err;
  }
}

/** Core's answer; a core too old to know `request_problem` served it anyway, so it is withheld. */
export async function shaped<T>(shape: Shape<unknown>, call: Promise<T>): Promise<T> {
  const res = await call;
  if (shape.problem) throw invalidRequest(shape.problem);
  return res;
}

export function userIdParam(request: FastifyRequest<{ Params: { id: string } }>): string {
  paramsAreText(request);
  const id = request.params.id;
  if (!UUID.test(id)) throw invalidRequest("user id must be a UUID");
  return id.toLowerCase();
}

/** Path id, then no query: the shape of a plain user read. */
export const userShape = (request: FastifyRequest<{ Params: { id: string } }>) =>
  checkShape(() => {
    const userId = userIdParam(request);
    noQuery(request);
    return userId;
  });
