/**
 * The gRPC health checking protocol (grpc.health.v1): Kubernetes gRPC probes,
 * Envoy and grpc-health-probe ask whether the server (service "") or one
 * service is serving. It follows `/ready`: the server is SERVING when every
 * readiness check passes, a service when the checks it depends on (the
 * platform database and its own, e.g. the analytics store) pass.
 */
import type { ServiceImpl } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus as Status } from "../../gen/grpc/health/v1/health_pb.js";
import { PlatformError } from "../core/errors.ts";

export { Health };

/** How often a Watch looks again (a status change is sent within this). */
const HEALTH_WATCH_INTERVAL_MS = 5_000;

/** Whether `service` ("" for the server) is ready now; undefined when there is no such service. */
export type ServingCheck = (service: string) => Promise<boolean | undefined>;

export function createHealthImpl(
  check: ServingCheck,
  services: () => string[],
  intervalMs = HEALTH_WATCH_INTERVAL_MS,
): ServiceImpl<typeof Health> {
  const statusOf = async (service: string) => {
    const ready = await check(service);
    return ready === undefined ? Status.SERVICE_UNKNOWN : ready ? Status.SERVING : Status.NOT_SERVING;
  };
  return {
    async check(req) {
      const status = await statusOf(req.service);
      if (status === Status.SERVICE_UNKNOWN) throw new PlatformError("not_found", `no service ${req.service}`);
      return { status };
    },
    async list() {
      const statuses: Record<string, { status: Status }> = {};
      for (const name of ["", ...services()]) statuses[name] = { status: await statusOf(name) };
      return { statuses };
    },
    async *watch(req, context) {
      let last: Status | undefined;
      while (!context.signal.aborted) {
        const status = await statusOf(req.service);
        if (status !== last) {
          last = status;
          yield { status };
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(done, intervalMs);
          function done() {
            clearTimeout(timer);
            context.signal.removeEventListener("abort", done);
            resolve();
          }
          context.signal.addEventListener("abort", done, { once: true });
        });
      }
    },
  };
}
