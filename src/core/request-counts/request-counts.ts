/**
 * The app requests of each facility, counted as they are answered, for the
 * operator's overview (AdminService `GetOverview`). A request costs a map
 * update in memory; every `FLUSH_INTERVAL_MS` the instance adds what it
 * counted to the database in one transaction (`request-count-store.ts`), so
 * the instances of one database add up, and reading a day costs the same
 * whatever the traffic. A crash loses at most one interval's counts; a flush
 * that fails keeps them for the next one.
 */
import type { Logger } from "pino";
import type { Db } from "../database/index.ts";
import { DAY_MS, utcDayOf } from "../time.ts";
import {
  createRequestCountStore,
  type AppDayCounts,
  type BucketCounts,
  type RequestCountStore,
} from "./request-count-store.ts";

/** The facilities whose requests are counted, in the order the overview lists them. */
export const COUNTED_FACILITIES = ["analytics", "inference", "mail", "queues", "secrets"] as const;
export type CountedFacility = (typeof COUNTED_FACILITIES)[number];

/** The length of one bucket. */
export const BUCKET_MS = 5 * 60_000;
/** How often an instance adds its counts to the database. */
const FLUSH_INTERVAL_MS = 5_000;
/** Buckets and days kept (the overview reads the last 24 hours and today). */
export const KEPT_MS = 2 * DAY_MS;

export interface RequestCounts {
  /** One request of `facility` answered with `status` (an HTTP status), by `appId` when an app called. */
  record(facility: CountedFacility, appId: string | undefined, status: number): void;
  /** Adds what was counted so far to the database (the interval's flush, and at close). */
  flush(): Promise<void>;
  start(): void;
  /** Stops the interval and flushes what is left. */
  close(): Promise<void>;
  readonly store: RequestCountStore;
}

/**
 * `facilityOf` remembered per name: every request asks, of a few dozen service names and route templates.
 * Bounded, in case something passes names that are not templates.
 */
function remembered(facilityOf: (name: string) => CountedFacility | undefined) {
  const known = new Map<string, CountedFacility | null>();
  return (name: string): CountedFacility | undefined => {
    let facility = known.get(name);
    if (facility === undefined) {
      facility = facilityOf(name) ?? null;
      if (known.size < 1000) known.set(name, facility);
    }
    return facility ?? undefined;
  };
}

const counted = (name: string | undefined) =>
  (COUNTED_FACILITIES as readonly string[]).includes(name ?? "") ? (name as CountedFacility) : undefined;

/** The facility of a service's type name (`platform.queues.v1.QueueService`), when it is one counted. */
export const facilityOfService = remembered((typeName) => counted(/^platform\.([a-z]+)\.v1\./.exec(typeName)?.[1]));

/** The facility of a REST route template (`/v1/queues/:queue`), when it is one counted. */
export const facilityOfRoute = remembered((route) => counted(/^\/v1\/([a-z]+)/.exec(route)?.[1]));

interface Tally {
  requests: number;
  clientErrors: number;
  serverErrors: number;
}

/** Adds the tallies of a flush that failed (`kept`) back into what was counted since (`into`), for the next one. */
function addBack<T extends Tally>(into: Map<string, T>, kept: Map<string, T>): void {
  for (const [k, v] of kept) {
    const now = into.get(k);
    if (now) {
      now.requests += v.requests;
      now.clientErrors += v.clientErrors;
      now.serverErrors += v.serverErrors;
    } else into.set(k, v);
  }
}

export function createRequestCounts(db: Db, logger: Logger, clock: () => number = Date.now): RequestCounts {
  const store = createRequestCountStore(db);
  let buckets = new Map<string, BucketCounts>();
  let apps = new Map<string, AppDayCounts>();
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> | undefined;
  let failing = false;

  // The key of a bucket and facility, made once per bucket rather than per request.
  let keys = { bucketMs: -1, byFacility: new Map<CountedFacility, string>() };
  const bucketKey = (bucketMs: number, facility: CountedFacility) => {
    if (keys.bucketMs !== bucketMs) keys = { bucketMs, byFacility: new Map() };
    let key = keys.byFacility.get(facility);
    if (key === undefined) keys.byFacility.set(facility, (key = `${bucketMs}|${facility}`));
    return key;
  };

  // Likewise the key of a day and app, made once per app and day: a new string per request was built and
  // hashed on every call.
  let appKeys = { day: "", byApp: new Map<string, string>() };
  const appDayKey = (day: string, appId: string) => {
    if (appKeys.day !== day) appKeys = { day, byApp: new Map() };
    let key = appKeys.byApp.get(appId);
    if (key === undefined) appKeys.byApp.set(appId, (key = `${day}|${appId}`));
    return key;
  };

  const add = (into: Tally, status: number) => {
    into.requests++;
    if (status >= 500) into.serverErrors++;
    else if (status >= 400) into.clientErrors++;
  };

  const flushOnce = async () => {
    if (buckets.size === 0 && apps.size === 0) return;
    const [b, a] = [buckets, apps];
    buckets = new Map();
    apps = new Map();
    try {
      await store.add([...b.values()], [...a.values()]);
      if (failing) logger.info("request counts written again");
      failing = false;
    } catch (err) {
      addBack(buckets, b);
      addBack(apps, a);
      if (!failing)
        logger.warn({ err: err instanceof Error ? err.message : String(err) }, "request counts not written");
      failing = true;
    }
  };

  const counts: RequestCounts = {
    store,
    record(facility, appId, status) {
      const now = clock();
      const bucketMs = now - (now % BUCKET_MS);
      const key = bucketKey(bucketMs, facility);
      let b = buckets.get(key);
      if (!b) {
        b = { bucket: new Date(bucketMs), facility, requests: 0, clientErrors: 0, serverErrors: 0 };
        buckets.set(key, b);
      }
      add(b, status);
      if (appId) {
        const day = utcDayOf(now);
        const appKey = appDayKey(day, appId);
        let a = apps.get(appKey);
        if (!a) {
          a = { day, appId, requests: 0, clientErrors: 0, serverErrors: 0 };
          apps.set(appKey, a);
        }
        add(a, status);
      }
    },
    flush() {
      // One flush at a time: a second waits for the first, then writes what came since.
      const run = (flushing ?? Promise.resolve()).then(flushOnce);
      const tracked = run.finally(() => {
        if (flushing === tracked) flushing = undefined;
      });
      flushing = tracked;
      return run;
    },
    start() {
      timer ??= setInterval(() => void counts.flush(), FLUSH_INTERVAL_MS);
      timer.unref();
    },
    async close() {
      if (timer) clearInterval(timer);
      timer = undefined;
      await counts.flush();
    },
  };
  return counts;
}
