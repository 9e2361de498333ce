import type { TokenResponse } from "../../gen/vaultgate/grants/v1/grants_pb.js";

/**
 * The agent grant token response, as every surface renders it (OAuth, JSON-RPC, CLI); without
 * refresh_token when none was issued (a client registered without that grant type).
 */
export function agentTokenJson(t: TokenResponse | undefined) {
  return {
    access_token: t?.accessToken ?? "",
    token_type: t?.tokenType ?? "Bearer",
    expires_in: Number(t?.expiresIn ?? 0n),
    ...(t?.refreshToken ? { refresh_token: t.refreshToken } : {}),
    scope: t?.scope ?? "",
    jti: t?.jti ?? "",
  };
}
