/**
 * Apps: the tenants. Every facility reads the authenticated app's record
 * (status, feature flags, limits) as defined here; only the admin API
 * writes it. Every statement on apps and their tokens is in `app-store.ts`.
 */

/** Per-app limits (docs/api.md#limits); each is a default the admin API can change per app. */
export interface AppLimits {
  eventsPerDay: number;
  mailPerDay: number;
  fastTokensPerDay: number;
  embedTokensPerDay: number;
  maxQueueDepth: number;
  maxPayloadBytes: number;
  messageTtlSeconds: number;
  leaseSeconds: number;
  maxOutstandingLinks: number;
  linkTtlSeconds: number;
  /** Days the mail log and analytics events are kept; older ones are deleted by housekeeping. */
  retentionDays: number;
  /**
   * Deliveries a queue message may have: one whose lease lapses after this
   * many becomes a dead letter instead of going back in line. 0: unlimited
   * (the base behaviour of docs/api.md#queues, the default).
   */
  maxDeliveries: number;
  /**
   * Rate limits (token buckets: a refill rate a second and a burst), enforced
   * per app across every instance together (`core/limits/`); 0: no limit.
   * Events count one each, queue messages one each, other requests one each.
   */
  eventsPerSecond: number;
  eventsBurst: number;
  queuePutsPerSecond: number;
  queuePutsBurst: number;
  requestsPerSecond: number;
  requestsBurst: number;
  /** Concurrency limits across every instance together; 0: no limit. */
  maxWaitingConsumes: number;
  maxOpenStreams: number;
  maxInFlightRequests: number;
}

export const DEFAULT_LIMITS: Readonly<AppLimits> = Object.freeze({
  eventsPerDay: 100_000,
  mailPerDay: 100,
  fastTokensPerDay: 200_000,
  embedTokensPerDay: 1_000_000,
  maxQueueDepth: 10_000,
  maxPayloadBytes: 262_144,
  messageTtlSeconds: 4 * 24 * 3600,
  leaseSeconds: 30,
  maxOutstandingLinks: 10,
  linkTtlSeconds: 24 * 3600,
  retentionDays: 90,
  maxDeliveries: 0,
  // Generous: well above what an ordinary app does (a tracker flushes at most
  // 1000 events a call; a worker runs a few consumes per replica), low enough
  // that one app's flood leaves the shared database to the others (docs/api.md#rate-limits).
  eventsPerSecond: 5000,
  eventsBurst: 50_000,
  queuePutsPerSecond: 2000,
  queuePutsBurst: 10_000,
  requestsPerSecond: 2000,
  requestsBurst: 5000,
  maxWaitingConsumes: 1000,
  maxOpenStreams: 200,
  maxInFlightRequests: 1000,
});

/** The start of the UTC day `days` days before `now`: what a retention of `days` keeps is from then on. */
export function retentionCutoff(days: number, now: Date = new Date()): Date {
  return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate() - days));
}

export const LIMIT_NAMES = Object.keys(DEFAULT_LIMITS) as (keyof AppLimits)[];

/**
 * The values each limit may be set to: UpdateApp refuses any other, and the
 * CLI checks the same ranges before it calls (one source, so the two never
 * disagree). A lifetime, a lease, a payload size or a retention of 0 would
 * make the facility unusable, so those start at 1; every other 0 means none.
 */
export const LIMIT_RANGES: Readonly<Record<keyof AppLimits, { min: number; max: number }>> = {
  eventsPerDay: { min: 0, max: 1_000_000_000 },
  mailPerDay: { min: 0, max: 10_000_000 },
  fastTokensPerDay: { min: 0, max: 2_000_000_000 },
  embedTokensPerDay: { min: 0, max: 2_000_000_000 },
  maxQueueDepth: { min: 0, max: 10_000_000 },
  maxPayloadBytes: { min: 1, max: 16 * 1024 * 1024 },
  messageTtlSeconds: { min: 1, max: 365 * 24 * 3600 },
  leaseSeconds: { min: 1, max: 43_200 },
  maxOutstandingLinks: { min: 0, max: 10_000 },
  linkTtlSeconds: { min: 1, max: 30 * 24 * 3600 },
  retentionDays: { min: 1, max: 3650 },
  maxDeliveries: { min: 0, max: 1000 },
  eventsPerSecond: { min: 0, max: 10_000_000 },
  eventsBurst: { min: 0, max: 100_000_000 },
  queuePutsPerSecond: { min: 0, max: 10_000_000 },
  queuePutsBurst: { min: 0, max: 100_000_000 },
  requestsPerSecond: { min: 0, max: 10_000_000 },
  requestsBurst: { min: 0, max: 100_000_000 },
  maxWaitingConsumes: { min: 0, max: 1_000_000 },
  maxOpenStreams: { min: 0, max: 1_000_000 },
  maxInFlightRequests: { min: 0, max: 1_000_000 },
};

/** Why `value` cannot be limit `name`'s value (the rule as error messages state it), or undefined when it can. */
export function limitProblem(name: keyof AppLimits, value: number): string | undefined {
  const { min, max } = LIMIT_RANGES[name];
  if (!Number.isInteger(value) || value < 0 || value > max) return `must be an integer from 0 to ${max}`;
  if (value < min) return `must be at least ${min}`;
  return undefined;
}

export interface AppRecord {
  id: string;
  name: string;
  status: "running" | "stopped";
  mailFrom: string;
  analyticsEnabled: boolean;
  secretsEnabled: boolean;
  limits: AppLimits;
  createdAt: Date;
  /** Bumped by every change of the record: settings, limits, blueprint (migration 0015). */
  revision: number;
}

/** The name pattern of docs/api.md (analytics and queues), shared by app names, event types and queue names. */
export const NAME_PATTERN = /^[a-z][a-z0-9_.-]{0,62}$/;
/** The rule of `NAME_PATTERN`, as error messages state it. */
export const NAME_RULE = "must match ^[a-z][a-z0-9_.-]{0,62}$";

/** The secret name pattern of docs/api.md#secrets, shared by the blueprint (admin) and the secrets facility. */
export const SECRET_NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
export const SECRET_NAME_RULE = "must match ^[A-Za-z_][A-Za-z0-9_]{0,127}$";

const UUID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Whether `value` has the shape of a UUID (either case, as PostgreSQL reads
 * one): the one check of every id that arrives from outside (app, token,
 * operator, link and message ids, page tokens) before it reaches a `::uuid`
 * cast, which would fail as a 500 instead of the caller's 400.
 */
export function isUuid(value: string): boolean {
  return UUID_PATTERN.test(value);
}

export type AppRow = {
  id: string;
  name: string;
  status: "running" | "stopped";
  mail_from: string;
  analytics_enabled: boolean;
  secrets_enabled: boolean;
  limits: Record<string, number>;
  created_at: Date;
  revision: string | number;
};

export function appFromRow(row: AppRow): AppRecord {
  return {
    id: row.id,
    name: row.name,
    status: row.status,
    mailFrom: row.mail_from,
    analyticsEnabled: row.analytics_enabled,
    secretsEnabled: row.secrets_enabled,
    limits: effectiveLimits(row.limits),
    createdAt: row.created_at,
    revision: Number(row.revision),
  };
}

export function effectiveLimits(overrides: Record<string, number> | null | undefined): AppLimits {
  const limits: AppLimits = { ...DEFAULT_LIMITS };
  for (const name of LIMIT_NAMES) {
    const value = overrides?.[name];
    if (typeof value === "number") limits[name] = value;
  }
  return limits;
}
