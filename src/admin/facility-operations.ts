/**
 * What the admin API calls in the other facilities: the typed operations
 * each one exports from its `index.ts`, handed in whole by the composition
 * root (`facilities.ts`). Every change takes the operator's unit of work
 * (`Tx`) first: the admin service opens it through its auditor, calls the
 * operations on it, and the audit entry is written on it last.
 */
import type { AnalyticsOperations } from "../analytics/index.ts";
import type { Facility } from "../core/facility.ts";
import type { MailOperations } from "../mail/index.ts";
import type { QueuesOperations } from "../queues/index.ts";
import type { SecretsOperations } from "../secrets/index.ts";

export interface FacilityOperations {
  analytics: AnalyticsOperations;
  mail: MailOperations;
  queues: QueuesOperations;
  secrets: SecretsOperations;
  /** The facilities whose own RPCs answer for an app (analytics, queues, secrets): an operator sees what the app would. */
  appFacilities: readonly Facility[];
}
