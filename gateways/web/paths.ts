/** Every page address the web gateway builds links and redirects to, in one place. */

import { AGENTS_PATH } from "../../lib/app-paths.js";

export { AGENTS_PATH };
export const DASHBOARD_PATH = "/dashboard";
export const SIGNIN_PATH = "/signin";
export const SIGNIN_CODE_PATH = "/signin/code";
export const SIGNIN_OIDC_PATH = "/signin/oidc";
export const SIGNIN_PASSKEY_PATH = "/signin/passkey";
export const SIGNOUT_PATH = "/signout";
/** Where the other web host of a split deployment ends its session with a sign-out handoff. */
export const SIGNOUT_CONTINUE_PATH = "/signout/continue";
export const STEP_UP_PATH = "/stepup";
export const STEP_UP_CODE_PATH = "/stepup/code";
export const STEP_UP_PASSKEY_PATH = "/stepup/passkey";
export const AUTHORIZE_PATH = "/oauth2/authorize";
export const AUTHORIZE_DECISION_PATH = "/oauth2/authorize/decision";
/** The owner's money at a glance. */
export const MONEY_PATH = "/dashboard/money";

export const agentPath = (agentId: string) => `${AGENTS_PATH}/${agentId}`;
export const revokePath = (agentId: string, grantId: string) => `${agentPath(agentId)}/grants/${grantId}/revoke`;
/** Revokes every grant of every agent at once. */
export const KILL_SWITCH_PATH = "/dashboard/kill-switch";
export const PASSKEYS_PATH = "/dashboard/passkeys";
/** The review page of a pending payment; core's `step_up_url` leads here through the agents page. */
export const paymentPath = (paymentId: string) => `/dashboard/approvals/payments/${paymentId}`;
/** The review page of a draft budget, named by its child agent principal. */
export const budgetPath = (agentId: string) => `/dashboard/approvals/budgets/${agentId}`;

export const fundPath = (vaultId: string) => `${MONEY_PATH}/budgets/${vaultId}/fund`;
export const closePath = (vaultId: string) => `${MONEY_PATH}/budgets/${vaultId}/close`;
export const sweepPath = (vaultId: string) => `${MONEY_PATH}/budgets/${vaultId}/sweep`;
/** The anchor of a vault's card, so a form's answer lands next to it. */
export const vaultAnchor = (vaultId: string) => `v-${vaultId}`;

/** The step-up page, coming back to `returnTo` (a same-origin path) once confirmed. */
export const stepUpPath = (returnTo: string) => `${STEP_UP_PATH}?return_to=${encodeURIComponent(returnTo)}`;
/** The sign-in page, coming back to `returnTo` (a same-origin path) once signed in. */
export const signInPath = (returnTo: string) => `${SIGNIN_PATH}?return_to=${encodeURIComponent(returnTo)}`;
