export {
  BUCKET_MS,
  COUNTED_FACILITIES,
  FLUSH_INTERVAL_MS,
  KEPT_MS,
  createRequestCounts,
  facilityOfRoute,
  facilityOfService,
  type CountedFacility,
  type RequestCounts,
} from "./request-counts.ts";
export type { AppDayCounts, BucketCounts, Counts, RequestCountStore } from "./request-count-store.ts";
