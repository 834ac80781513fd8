/**
 * Every migration, in order. Names sort in the order they run; a facility adds
 * its own file and one line here. Applied migrations are never edited.
 */
import type { Migration } from "kysely/migration";
import * as foundation from "./0001-foundation.ts";
import * as queues from "./0002-queues.ts";
import * as analytics from "./0003-analytics.ts";
import * as secrets from "./0004-secrets.ts";
import * as mail from "./0005-mail.ts";
import * as authChanges from "./0006-auth-changes.ts";
import * as tokenLastUsed from "./0007-token-last-used.ts";
import * as platformSettings from "./0008-platform-settings.ts";
import * as deadLetters from "./0009-dead-letters.ts";
import * as analyticsDayRollups from "./0010-analytics-day-rollups.ts";
import * as queueControls from "./0011-queue-controls.ts";
import * as queueCounts from "./0012-queue-counts.ts";
import * as eventFeed from "./0014-event-feed.ts";
import * as appRevision from "./0015-app-revision.ts";
import * as operators from "./0016-operators.ts";
import * as auditLog from "./0017-audit-log.ts";
import * as idempotencyKeys from "./0018-idempotency-keys.ts";
import * as queueActivity from "./0019-queue-activity.ts";
import * as queueDepth from "./0020-queue-depth.ts";
import * as secretVersionFloors from "./0021-secret-version-floors.ts";
import * as queueClaims from "./0022-queue-claims.ts";
import * as mailUnconfirmed from "./0023-mail-unconfirmed.ts";
import * as queueDepthExclusive from "./0024-queue-depth-exclusive.ts";
import * as limitExchange from "./0025-limit-exchange.ts";
import * as quotaReservations from "./0026-quota-reservations.ts";
import * as messageTrace from "./0027-message-trace.ts";
import * as overviewRollups from "./0028-overview-rollups.ts";
import * as operatorSessions from "./0029-operator-sessions.ts";
import * as queueJitterAndReasons from "./0030-queue-jitter-and-reasons.ts";
import * as queuePriorities from "./0031-queue-priorities.ts";
import * as analyticsIdentity from "./0032-analytics-identity.ts";
import * as queueSchedules from "./0033-queue-schedules.ts";
import * as queueRateLimits from "./0034-queue-rate-limits.ts";
import * as queueGroups from "./0035-queue-groups.ts";
import * as analyticsEventsByType from "./0036-analytics-events-by-type.ts";
import * as analyticsEventsOneIndex from "./0037-analytics-events-one-index.ts";
import * as queueDepthWithin from "./0038-queue-depth-within.ts";

export const migrations: Record<string, Migration> = {
  "0001-foundation": foundation,
  "0002-queues": queues,
  "0003-analytics": analytics,
  "0004-secrets": secrets,
  "0005-mail": mail,
  "0006-auth-changes": authChanges,
  "0007-token-last-used": tokenLastUsed,
  "0008-platform-settings": platformSettings,
  "0009-dead-letters": deadLetters,
  "0010-analytics-day-rollups": analyticsDayRollups,
  "0011-queue-controls": queueControls,
  "0012-queue-counts": queueCounts,
  "0014-event-feed": eventFeed,
  "0015-app-revision": appRevision,
  "0016-operators": operators,
  "0017-audit-log": auditLog,
  "0018-idempotency-keys": idempotencyKeys,
  "0019-queue-activity": queueActivity,
  "0020-queue-depth": queueDepth,
  "0021-secret-version-floors": secretVersionFloors,
  "0022-queue-claims": queueClaims,
  "0023-mail-unconfirmed": mailUnconfirmed,
  "0024-queue-depth-exclusive": queueDepthExclusive,
  "0025-limit-exchange": limitExchange,
  "0026-quota-reservations": quotaReservations,
  "0027-message-trace": messageTrace,
  "0028-overview-rollups": overviewRollups,
  "0029-operator-sessions": operatorSessions,
  "0030-queue-jitter-and-reasons": queueJitterAndReasons,
  "0031-queue-priorities": queuePriorities,
  "0032-analytics-identity": analyticsIdentity,
  "0033-queue-schedules": queueSchedules,
  "0034-queue-rate-limits": queueRateLimits,
  "0035-queue-groups": queueGroups,
  "0036-analytics-events-by-type": analyticsEventsByType,
  "0037-analytics-events-one-index": analyticsEventsOneIndex,
  "0038-queue-depth-within": queueDepthWithin,
};
