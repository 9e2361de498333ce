/** Dashboard addresses that core writes into its answers and the web gateway serves, defined once. */

export const AGENTS_PATH = "/dashboard/agents";

/** The query parameter by which an agents-page link leads on to a payment's review page. */
export const PAYMENT_LINK_PARAM = "payment";

/** The owner's link to a payment awaiting step-up: the paying agent's page (or the agents page), then the payment. */
export function paymentLinkPath(paymentId: string, agentPrincipalId: string | null): string {
  const agent = agentPrincipalId ? `/${encodeURIComponent(agentPrincipalId)}` : "";
  return `${AGENTS_PATH}${agent}?${PAYMENT_LINK_PARAM}=${encodeURIComponent(paymentId)}`;
}
