/**
 * Meta: the public liveness probe and version report, over REST
 * (`GET /health`, `GET /version`) and MetaService, and gRPC server reflection.
 */
import { MetaService } from "../../gen/platform/meta/v1/meta_pb.js";
import type { Facility } from "../core/facility.ts";
import { createMetaService } from "./meta-service.ts";
import { metaRoutes } from "./meta-routes.ts";

export { packageInfo } from "./meta-service.ts";
export { createHealthImpl, Health } from "./health.ts";
export {
  createReflectionImpl,
  createReflectionV1AlphaImpl,
  ServerReflection,
  ServerReflectionV1Alpha,
} from "./reflection.ts";

export function createMetaFacility(): Facility<typeof MetaService> {
  return { service: MetaService, impl: createMetaService(), routes: metaRoutes };
}
