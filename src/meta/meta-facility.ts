/**
 * Meta: the public liveness probe and version report, over REST
 * (`GET /health`, `GET /version`) and MetaService.
 */
import { createRequire } from "node:module";
import type { FastifyInstance } from "fastify";
import { MetaService } from "../../gen/platform/meta/v1/meta_pb.js";
import type { Facility } from "../core/facility.ts";

const pkg = createRequire(import.meta.url)("../../package.json") as { name: string; version: string };

export const packageInfo: Readonly<{ name: string; version: string }> = Object.freeze({ name: pkg.name, version: pkg.version });

export function createMetaFacility(): Facility<typeof MetaService> {
  return {
    service: MetaService,
    impl: {
      getHealth: () => ({ status: "ok" }),
      getVersion: () => ({ ...packageInfo }),
    },
    registerRoutes(fastify: FastifyInstance) {
      fastify.get("/health", async () => ({ status: "ok" }));
      fastify.get("/version", async () => ({ ...packageInfo }));
    },
  };
}
