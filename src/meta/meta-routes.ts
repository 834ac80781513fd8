/** `GET /health` and `GET /version`, mapped onto `MetaService` (public: no token). */
import { MetaService } from "../../gen/platform/meta/v1/meta_pb.js";
import { z } from "zod";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";

/** The 200 bodies of the routes below (the OpenAPI document's response shapes). */
const HealthResponse = z.object({ status: z.literal("ok") });
const VersionResponse = z.object({ name: z.string(), version: z.string() });

export const metaRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "GET",
    url: "/health",
    rpc: MetaService.method.getHealth,
    responseSchema: HealthResponse,
    doc: { summary: "Liveness", public: true, errors: [], responseExample: { status: "ok" } },
    response: (res) => ({ status: res.status }),
  }),
  defineRoute({
    method: "GET",
    url: "/version",
    rpc: MetaService.method.getVersion,
    responseSchema: VersionResponse,
    doc: {
      summary: "Package name and version",
      public: true,
      errors: [],
      responseExample: { name: "platform-batteries", version: "0.2.0" },
    },
    response: (res) => ({ name: res.name, version: res.version }),
  }),
];
