export {
  BUCKET_MS,
  COUNTED_FACILITIES,
  KEPT_MS,
  createRequestCounts,
  facilityOfRoute,
  facilityOfService,
  type RequestCounts,
} from "./request-counts.ts";
export type { RequestCountStore } from "./request-count-store.ts";
