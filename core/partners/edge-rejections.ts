/** A gateway's refusals at its edge, which core audits for the partner the request proves. */

import { Reason } from "../../gen/vaultgate/common/v1/errors_pb.js";
import { EdgeRejection } from "../../gen/vaultgate/treasury/v1/treasury_pb.js";

/** Edge rejections: the audit reason (the gateway's error code) and core's answer. */
export const EDGE_REJECTIONS: Partial<Record<EdgeRejection, { label: string; reason: Reason; message: string }>> = {
  [EdgeRejection.BODY_TOO_LARGE]: { label: "body_too_large", reason: Reason.INVALID_REQUEST, message: "request body is too large" },
  [EdgeRejection.INVALID_JSON]: { label: "invalid_json", reason: Reason.INVALID_REQUEST, message: "request body is not valid JSON" },
  [EdgeRejection.BEARER_MISSING]: { label: "invalid_token", reason: Reason.INVALID_TOKEN, message: "a bearer access token is required" },
  [EdgeRejection.MALFORMED]: { label: "invalid_request", reason: Reason.INVALID_REQUEST, message: "malformed request" },
  [EdgeRejection.UNSUPPORTED_ENCODING]: {
    label: "unsupported_media_type",
    reason: Reason.INVALID_REQUEST,
    message: "the request body is in a content coding the service does not read",
  },
};
