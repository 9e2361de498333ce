import { createClient, type Client, type Transport } from "@connectrpc/connect";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { AuditService } from "../gen/vaultgate/audit/v1/audit_pb.js";
import { GrantsService } from "../gen/vaultgate/grants/v1/grants_pb.js";
import { PartnersService } from "../gen/vaultgate/partners/v1/partners_pb.js";
import { BudgetsService } from "../gen/vaultgate/budgets/v1/budgets_pb.js";
import { PartnerResourcesService } from "../gen/vaultgate/partners/v1/partners_pb.js";
import { TreasuryService } from "../gen/vaultgate/treasury/v1/treasury_pb.js";

export interface CoreClients {
  health: Client<typeof Health>;
  partners: Client<typeof PartnersService>;
  audit: Client<typeof AuditService>;
  grants: Client<typeof GrantsService>;
  budgets: Client<typeof BudgetsService>;
  partnerResources: Client<typeof PartnerResourcesService>;
  treasury: Client<typeof TreasuryService>;
}

/** Typed clients over one transport: in-memory router transport or gRPC h2c. */
export function createCoreClients(transport: Transport): CoreClients {
  return {
    health: createClient(Health, transport),
    partners: createClient(PartnersService, transport),
    audit: createClient(AuditService, transport),
    grants: createClient(GrantsService, transport),
    budgets: createClient(BudgetsService, transport),
    partnerResources: createClient(PartnerResourcesService, transport),
    treasury: createClient(TreasuryService, transport),
  };
}

/** Call options that carry the edge request id into core (only headers cross both transports). */
export function withRequestId(requestId: string) {
  return { headers: { "x-request-id": requestId } };
}
