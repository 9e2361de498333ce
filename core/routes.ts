import type { ConnectRouter, ServiceImpl } from "@connectrpc/connect";
import { Health } from "../gen/grpc/health/v1/health_pb.js";
import { AuditService } from "../gen/vaultgate/audit/v1/audit_pb.js";
import { GrantsService } from "../gen/vaultgate/grants/v1/grants_pb.js";
import { PartnersService } from "../gen/vaultgate/partners/v1/partners_pb.js";
import { BudgetsService } from "../gen/vaultgate/budgets/v1/budgets_pb.js";
import { PartnerResourcesService } from "../gen/vaultgate/partners/v1/resources_pb.js";
import { TreasuryService } from "../gen/vaultgate/treasury/v1/treasury_pb.js";
import { createReflectionServices, ReflectionV1, ReflectionV1Alpha } from "./observability/reflection.js";

export interface CoreServices {
  health: ServiceImpl<typeof Health>;
  partners: ServiceImpl<typeof PartnersService>;
  audit: ServiceImpl<typeof AuditService>;
  grants: ServiceImpl<typeof GrantsService>;
  budgets: ServiceImpl<typeof BudgetsService>;
  partnerResources: ServiceImpl<typeof PartnerResourcesService>;
  treasury: ServiceImpl<typeof TreasuryService>;
}

/** The largest reflection request core reads (a real one is a name, far smaller). */
export const REFLECTION_READ_MAX_BYTES = 64 * 1024;

/**
 * Registers every service and reflection (which only describes: every RPC still takes its own
 * credential), shared by the h2c server and the in-process transport.
 */
export function createRoutes(services: CoreServices) {
  const reflection = createReflectionServices([Health, PartnersService, AuditService, GrantsService, BudgetsService, PartnerResourcesService, TreasuryService]);
  return (router: ConnectRouter) => {
    router.service(Health, services.health);
    router.service(PartnersService, services.partners);
    router.service(AuditService, services.audit);
    router.service(GrantsService, services.grants);
    router.service(BudgetsService, services.budgets);
    router.service(PartnerResourcesService, services.partnerResources);
    router.service(TreasuryService, services.treasury);
    // A reflection request names one file or symbol; its stream stays open, so its messages stay small.
    router.service(ReflectionV1, reflection.v1, { readMaxBytes: REFLECTION_READ_MAX_BYTES });
    router.service(ReflectionV1Alpha, reflection.v1alpha, { readMaxBytes: REFLECTION_READ_MAX_BYTES });
  };
}
