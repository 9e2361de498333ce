import type { ClientErrorAnswer } from "../shared/client-errors.js";
import type { ResourceErrorBody } from "./resource-envelope.js";
import { TOKEN_PATH } from "./token-route.js";

const TOO_LARGE = "the request line and headers are over the server's 16 KiB limit";

/**
 * The answer to a partner request Node's HTTP parser refused, before any route or hook ran
 * (`target` is its path under the prefix): headers over the limit are 431, anything else it
 * cannot read is malformed (400); the token endpoint answers in its flat OAuth envelope.
 */
export function partnerParserRefusal(target: string, status: number, requestId: string): ClientErrorAnswer {
  const tooLarge = status === 431;
  const path = target.split("?", 1)[0];
  if (path === TOKEN_PATH) {
    const body = { error: "invalid_request", error_description: tooLarge ? TOO_LARGE : "malformed request" };
    return { status: tooLarge ? 431 : 400, body: JSON.stringify(body) };
  }
  const e: ResourceErrorBody = tooLarge
    ? { status, code: "request_header_fields_too_large", message: TOO_LARGE }
    : { status: 400, code: "invalid_request", message: "malformed request" };
  return { status: e.status, body: JSON.stringify({ error: { code: e.code, message: e.message, request_id: requestId } }) };
}
