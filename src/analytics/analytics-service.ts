/**
 * `AnalyticsService`, implemented once for Connect, gRPC and the REST routes
 * (`analytics-routes.ts`) (docs/api.md#analytics, docs/analytics.md): an app registers event types, logs events of those types within a
 * daily cap, and counts them back in calendar buckets.
 *
 * Terminology:
 * - **event type**: a name and the properties its events may carry, each with
 *   a declared kind (`string`, `number`, `boolean`). Platform data: always in
 *   the platform database, so registering and listing never answer 501/502.
 * - **event store**: where events live, behind one interface
 *   (`event-store.ts`): the SQL store (default) or MongoDB (`MONGODB_URL`).
 * - **batch**: the events of one log call, stored whole or refused whole.
 * - **bucket**: a calendar hour, day, week (from Monday) or month, in UTC or
 *   in the `timezone` extension's zone; only non-empty buckets are answered.
 * - **group**: the value of the `groupBy` property, as stored (a string), or
 *   null for events that do not carry it.
 * - **allowance**: the `events` counter of the shared quota module, capped by
 *   the app's `eventsPerDay`; a batch that does not fit is refused whole.
 */
import { timestampFromDate, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { AnalyticsService, PropertyKind, type EventTypeSchema } from "../../gen/platform/analytics/v1/analytics_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ServiceImpl } from "@connectrpc/connect";
import type { Logger } from "pino";
import { NAME_PATTERN, NAME_RULE, type AppRecord } from "../core/apps/apps.ts";
import { appOf } from "../core/auth.ts";
import { answerInRun } from "../core/idempotent-run.ts";
import { PlatformError, invalidArgument } from "../core/errors.ts";
import { createFairGate } from "../core/fair-gate.ts";
import type { Metrics } from "../core/metrics.ts";
import { withReservation, type Quotas } from "../core/quotas/index.ts";
import { MAX_BUCKETS, bucketCount, checkTimezone, isUtc } from "./buckets.ts";
import { INTERVAL_OF, KIND_NAME, KIND_OF, UNIT_OF } from "./enum-names.ts";
import type { EventStore, StoredEvent } from "./event-store.ts";
import type { EventTypeRecord, EventTypeStore, PropertyKindName } from "./event-type-store.ts";
import { MAX_EVENTS_PER_CALL, MAX_PROPERTIES, quoted, validateEvents } from "./validate-events.ts";
import {
  AGGREGATE_OF,
  DEFAULT_GROUP_LIMIT,
  MAX_GROUP_LIMIT,
  checkConditions,
  checkExtensions,
  runExtended,
  usesExtensions,
} from "./query-extensions.ts";
import { computeFunnel, funnelAnswer, type FunnelStepAnswer } from "./funnel.ts";

/** Funnel steps (docs/analytics.md "Funnels"). */
const MIN_FUNNEL_STEPS = 2;
const MAX_FUNNEL_STEPS = 8;
/** The conversion window: 7 days unless said, at most 90. */
const DEFAULT_FUNNEL_WINDOW_S = 7 * 86_400;
const MAX_FUNNEL_WINDOW_S = 90 * 86_400;
/** The longest range of first steps: funnels read raw events, a year of them at most. */
const MAX_FUNNEL_RANGE_DAYS = 366;
import { DAY_MS, MAX_TIME_MS, MIN_TIME_MS, timestampToMs } from "../core/time.ts";

export interface AnalyticsServiceOptions {
  types: EventTypeStore;
  store: EventStore;
  quotas: Quotas;
  logger: Logger;
  metrics: Metrics;
  /**
   * Event batches stored at once on this instance (default 4); more wait, and
   * the apps waiting are served in turn (`core/fair-gate.ts`), one app holding
   * at most half of the places while another waits.
   */
  ingestConcurrency?: number;
}

/** How long a batch waits for its turn to be stored before it is refused (429 `rate_limited`, retry soon). */
const INGEST_WAIT_MS = 10_000;

function eventTypeMessage(t: EventTypeRecord): MessageInitShape<typeof EventTypeSchema> {
  const properties: Record<string, PropertyKind> = {};
  for (const [name, kind] of Object.entries(t.properties)) properties[name] = KIND_OF[kind];
  return {
    name: t.name,
    properties,
    createdAt: timestampFromDate(t.createdAt),
    updatedAt: timestampFromDate(t.updatedAt),
  };
}

function requireAnalytics(app: AppRecord): void {
  if (!app.analyticsEnabled) {
    throw new PlatformError(
      "not_configured",
      "analytics is not enabled for this app; the platform operator enables it",
    );
  }
}

function instant(ts: Parameters<typeof timestampToMs>[0], field: string): number {
  const ms = timestampToMs(ts);
  if (ms === undefined) throw invalidArgument(field, "must be between years 0001 and 9999");
  return ms;
}

export function createAnalyticsService(options: AnalyticsServiceOptions): ServiceImpl<typeof AnalyticsService> {
  const { types, store, quotas, logger } = options;
  const recorded = options.metrics.counter("analytics_events_recorded_total", "Events stored, by event store.", [
    "store",
  ] as const);
  const ingest = createFairGate({
    capacity: options.ingestConcurrency ?? 4,
    maxShare: 0.5,
    timeoutMs: INGEST_WAIT_MS,
    timeoutError: () =>
      new PlatformError("rate_limited", "too many event batches wait to be stored; retry shortly", {
        details: ["the service stores each app's batches in turn; this one waited its turn too long"],
        retryAfterSeconds: 1,
      }),
  });

  return {
    async registerEventType(req, context) {
      const app = appOf(context);
      if (!req.name) throw invalidArgument("name", "is required");
      if (!NAME_PATTERN.test(req.name)) throw invalidArgument("name", NAME_RULE);
      const names = Object.keys(req.properties);
      if (names.length > MAX_PROPERTIES)
        throw invalidArgument("properties", `must declare at most ${MAX_PROPERTIES} properties`);
      const properties: Record<string, PropertyKindName> = {};
      for (const name of names.sort()) {
        if (!NAME_PATTERN.test(name))
          throw invalidArgument(`properties.${quoted(name).slice(1, -1)}`, `the name ${NAME_RULE}`);
        const kind = KIND_NAME[req.properties[name]];
        if (!kind) throw invalidArgument(`properties.${name}`, "must be string, number or boolean");
        properties[name] = kind;
      }
      const saved = await types.register(app.id, req.name, properties);
      return { eventType: eventTypeMessage(saved) };
    },

    async listEventTypes(_req, context) {
      const app = appOf(context);
      return { types: (await types.list(app.id)).map(eventTypeMessage) };
    },

    async logEvents(req, context) {
      const app = appOf(context);
      requireAnalytics(app);
      const now = Date.now();
      const names = new Set<string>();
      let last: string | undefined;
      for (const e of req.events)
        if (e.type !== last) {
          last = e.type;
          if (NAME_PATTERN.test(e.type)) names.add(e.type);
        }
      // An oversized batch is refused by validateEvents without reading types.
      const known =
        req.events.length <= MAX_EVENTS_PER_CALL
          ? await types.get(app.id, [...names])
          : new Map<string, EventTypeRecord>();
      // What a batch in flight holds survives the young generation's collections (it waits for its turn and
      // its statements), each of which copies it, and is then promoted: so it is held in one form only. The
      // request's events (protobuf messages, some 400 KB for a batch of 1,000) are not read again once
      // validated, and the validated events go to the store, which keeps what its statement needs.
      let events: StoredEvent[] | undefined = validateEvents(req.events, known, now);
      req.events = [];
      const count = events.length;
      const answer = (remainingToday: number) => ({
        recorded: BigInt(count),
        remainingToday: BigInt(remainingToday),
      });
      // With an Idempotency-Key and a store in the platform database, the answer commits with the events.
      const answerIn = answerInRun(context, AnalyticsService.method.logEvents, answer);
      // Batches are stored in their app's turn: one app's flood waits behind itself, not in front of others.
      await ingest.acquire(app.id);
      let stored;
      try {
        stored = await withReservation(
          quotas,
          {
            appId: app.id,
            counter: "events",
            amount: count,
            cap: app.limits.eventsPerDay,
            onReleaseError: (e) => logger.error({ err: e }, "could not release an events reservation"),
            onFailure: (err) => {
              if (err instanceof PlatformError && err.code === "upstream_error")
                logger.warn({ err: err.cause, appId: app.id }, "analytics store unreachable");
            },
          },
          (reservation) => {
            // The events and their charge commit together (a store in the platform database).
            const spend = () => quotas.spendIn(reservation);
            const batch = events!;
            events = undefined;
            return answerIn && store.insertWithin
              ? store.insertWithin(app.id, batch, (trx) => answerIn(trx, reservation.remaining), spend)
              : store.insert(app.id, batch, spend);
          },
        );
      } finally {
        ingest.release(app.id);
      }
      recorded.inc({ store: store.kind }, count);
      return answer(stored.remaining);
    },

    async queryFunnel(req, context) {
      const app = appOf(context);
      requireAnalytics(app);
      if (req.steps.length < MIN_FUNNEL_STEPS || req.steps.length > MAX_FUNNEL_STEPS)
        throw invalidArgument("steps", `must have ${MIN_FUNNEL_STEPS} to ${MAX_FUNNEL_STEPS} steps`);
      req.steps.forEach((step, i) => {
        if (!step.type) throw invalidArgument(`steps[${i}].type`, "is required");
        if (!NAME_PATTERN.test(step.type)) throw invalidArgument(`steps[${i}].type`, NAME_RULE);
      });
      if (!req.since) throw invalidArgument("since", "is required");
      const since = instant(req.since, "since");
      const until = req.until ? instant(req.until, "until") : Math.min(Date.now(), MAX_TIME_MS);
      if (since >= until) throw invalidArgument("since", "must be before until");
      if (until - since > MAX_FUNNEL_RANGE_DAYS * DAY_MS)
        throw invalidArgument("since", `the range must be at most ${MAX_FUNNEL_RANGE_DAYS} days`);
      const windowSeconds = req.windowSeconds === undefined ? DEFAULT_FUNNEL_WINDOW_S : Number(req.windowSeconds);
      if (!Number.isSafeInteger(windowSeconds) || windowSeconds < 1 || windowSeconds > MAX_FUNNEL_WINDOW_S)
        throw invalidArgument("windowSeconds", `must be 1 to ${MAX_FUNNEL_WINDOW_S} seconds (90 days)`);
      const limit = req.limit ?? DEFAULT_GROUP_LIMIT;
      if (!Number.isInteger(limit) || limit < 1 || limit > MAX_GROUP_LIMIT)
        throw invalidArgument("limit", `must be an integer from 1 to ${MAX_GROUP_LIMIT}`);
      const known = await types.get(app.id, [...new Set(req.steps.map((s) => s.type))]);
      const stepTypes = req.steps.map((step, i) => {
        const type = known.get(step.type);
        if (!type) throw invalidArgument(`steps[${i}].type`, `no event type named ${quoted(step.type)} is registered`);
        return type;
      });
      const conditions = req.steps.map((step, i) => checkConditions(step.where, stepTypes[i], `steps[${i}].where`));
      if (req.breakdown !== undefined) {
        if (!NAME_PATTERN.test(req.breakdown)) throw invalidArgument("breakdown", NAME_RULE);
        if (!Object.hasOwn(stepTypes[0].properties, req.breakdown))
          throw invalidArgument(
            "breakdown",
            `${quoted(req.breakdown)} is not a property of the first step's type ${quoted(stepTypes[0].name)}`,
          );
      }
      const windowMs = windowSeconds * 1000;
      // Later steps may follow the last start by up to the window.
      const laterUntil = Math.min(until + windowMs, MAX_TIME_MS);
      const answer = store.funnel
        ? funnelAnswer(
            await store.funnel({
              appId: app.id,
              steps: req.steps.map((step, i) => ({ type: step.type, where: conditions[i] })),
              since,
              until,
              windowMs,
              laterUntil,
              breakdown: req.breakdown,
              limit,
            }),
          )
        : computeFunnel(
            await Promise.all(
              req.steps.map((step, i) =>
                store.stepEvents({
                  appId: app.id,
                  type: step.type,
                  where: conditions[i],
                  since,
                  until: i === 0 ? until : laterUntil,
                  breakdown: i === 0 ? req.breakdown : undefined,
                }),
              ),
            ),
            {
              types: req.steps.map((s) => s.type),
              windowMs,
              limit,
              breakdown: req.breakdown !== undefined,
            },
          );
      const stepMessages = (steps: FunnelStepAnswer[]) =>
        steps.map((s, i) => ({
          type: req.steps[i].type,
          users: BigInt(s.users),
          conversionFromFirst: s.conversionFromFirst,
          conversionFromPrevious: s.conversionFromPrevious,
          medianSecondsFromPrevious: s.medianSecondsFromPrevious,
        }));
      return {
        steps: stepMessages(answer.steps),
        since: timestampFromMs(since),
        until: timestampFromMs(until),
        windowSeconds: BigInt(windowSeconds),
        breakdown: req.breakdown,
        groups: answer.groups.map((g) => ({
          group: g.group ?? undefined,
          other: g.other,
          steps: stepMessages(g.steps),
        })),
        otherGroups: BigInt(answer.otherGroups),
      };
    },

    async queryEvents(req, context) {
      const app = appOf(context);
      requireAnalytics(app);
      if (!req.type) throw invalidArgument("type", "is required");
      if (!NAME_PATTERN.test(req.type)) throw invalidArgument("type", NAME_RULE);
      if (req.groupBy !== undefined && !NAME_PATTERN.test(req.groupBy)) throw invalidArgument("groupBy", NAME_RULE);
      const unit = UNIT_OF[req.interval];
      if (!unit) throw invalidArgument("interval", "must be hour, day, week or month");
      if (!req.since) throw invalidArgument("since", "is required");
      const since = instant(req.since, "since");
      const until = req.until ? instant(req.until, "until") : Math.min(Date.now(), MAX_TIME_MS);
      if (since >= until) throw invalidArgument("since", "must be before until");
      let timezone: string | undefined;
      if (req.timezone !== undefined && req.timezone !== "") {
        timezone = checkTimezone(req.timezone);
        if (isUtc(timezone)) timezone = undefined;
        else if (unit === "hour") throw invalidArgument("timezone", "applies to day, week and month buckets only");
      }
      const buckets = bucketCount(since, until, unit, timezone);
      if (buckets > MAX_BUCKETS) {
        throw invalidArgument("since", `the range spans ${buckets} ${unit} buckets; at most ${MAX_BUCKETS}`);
      }
      const type = (await types.get(app.id, [req.type])).get(req.type);
      if (!type) throw invalidArgument("type", `no event type named ${quoted(req.type)} is registered`);
      if (usesExtensions(req)) {
        const ext = checkExtensions(req, type);
        const answer = await runExtended(
          store,
          { appId: app.id, type: type.name, since, until, unit, timezone, ...ext },
          ext.limit,
        );
        const list = req.groupByProperties.length > 0;
        return {
          type: type.name,
          interval: INTERVAL_OF[unit],
          since: timestampFromMs(since),
          until: timestampFromMs(until),
          groupBy: list ? undefined : req.groupBy,
          groupByProperties: list ? ext.groupBy : [],
          aggregate: AGGREGATE_OF[ext.aggregate],
          of: req.of,
          limit: ext.limit,
          buckets: answer.rows.map((r) => ({
            at: timestampFromMs(Math.max(r.at ?? since, MIN_TIME_MS)),
            group: list ? undefined : (r.groups[0] ?? undefined),
            groups: list ? r.groups.map((value) => ({ value: value ?? undefined })) : [],
            count: BigInt(r.count),
            value: r.value,
            other: r.other,
          })),
          total: BigInt(answer.count),
          totalValue: answer.total ?? undefined,
          otherGroups: BigInt(answer.otherGroups),
        };
      }
      if (req.groupBy !== undefined && !Object.hasOwn(type.properties, req.groupBy)) {
        throw invalidArgument("groupBy", `${quoted(req.groupBy)} is not a property of type ${quoted(type.name)}`);
      }
      const rows = await store.count({
        appId: app.id,
        type: type.name,
        since,
        until,
        unit,
        groupBy: req.groupBy,
        timezone,
      });
      let total = 0;
      for (const r of rows) total += r.count;
      return {
        type: type.name,
        interval: INTERVAL_OF[unit],
        since: timestampFromMs(since),
        until: timestampFromMs(until),
        groupBy: req.groupBy,
        // A zoned first bucket may begin before year 1 (New York's day holding 0001-01-01T00:00Z began in
        // year 0), which a Timestamp cannot hold: it is answered from the earliest instant there is.
        buckets: rows.map((r) => ({
          at: timestampFromMs(Math.max(r.at, MIN_TIME_MS)),
          group: r.group ?? undefined,
          count: BigInt(r.count),
        })),
        total: BigInt(total),
      };
    },
  };
}
