/** `GET /health` and `GET /version`, mapped onto `MetaService` (public: no token). */
import { MetaService } from "../../gen/platform/meta/v1/meta_pb.js";
import { defineRoute, type AnyRestRoute } from "../core/http/rest-router.ts";

export const metaRoutes: readonly AnyRestRoute[] = [
  defineRoute({
    method: "GET",
    url: "/health",
    rpc: MetaService.method.getHealth,
    response: (res) => ({ status: res.status }),
  }),
  defineRoute({
    method: "GET",
    url: "/version",
    rpc: MetaService.method.getVersion,
    response: (res) => ({ name: res.name, version: res.version }),
  }),
];
