import { accountTools } from "./tools/accounts.js";
import { auditTools } from "./tools/audit.js";
import { budgetTools } from "./tools/budgets.js";
import { grantTools } from "./tools/grants.js";
import { paymentTools } from "./tools/payments.js";
import type { Tool } from "./tools/kit.js";

export type { Category, Tool, ToolContext, UrlElicitation } from "./tools/kit.js";

/** Every agent tool, in the order tools/list shows them; each family defines its own in tools/. */
export const TOOLS: readonly Tool[] = [...budgetTools, ...paymentTools, ...accountTools, ...auditTools, ...grantTools];
