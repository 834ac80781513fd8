/**
 * Every SQL statement on `request_counts` and `app_request_days` (migration
 * 0027): the flush of an instance's counts (one upsert per table, adding to
 * what other instances added), the overview's reads (a day of buckets, one
 * day of apps) and the prune.
 */
import { sql } from "kysely";
import type { Db } from "../database/index.ts";

type RequestCountTables = {
  request_counts: {
    bucket: Date;
    facility: string;
    requests: number;
    client_errors: number;
    server_errors: number;
  };
  app_request_days: {
    day: string;
    app_id: string;
    requests: number;
    client_errors: number;
    server_errors: number;
  };
};

interface Counts {
  requests: number;
  clientErrors: number;
  serverErrors: number;
}

export interface BucketCounts extends Counts {
  bucket: Date;
  facility: string;
}

export interface AppDayCounts extends Counts {
  /** The UTC day, YYYY-MM-DD. */
  day: string;
  appId: string;
}

export interface RequestCountStore {
  /** Adds the counts to the rows (inserting those missing), in one transaction. */
  add(buckets: BucketCounts[], apps: AppDayCounts[]): Promise<void>;
  /** The buckets from `since` on, per facility. */
  buckets(since: Date): Promise<BucketCounts[]>;
  /** The `limit` apps with the most requests on `day`, most first. */
  topApps(day: string, limit: number): Promise<AppDayCounts[]>;
  /** Deletes the rows of buckets before `before` and of days before `beforeDay`; how many. */
  prune(before: Date, beforeDay: string): Promise<number>;
}

const num = (v: string | number) => Number(v);

export function createRequestCountStore(database: Db): RequestCountStore {
  const db = database.withTables<RequestCountTables>();
  return {
    async add(buckets, apps) {
      if (buckets.length === 0 && apps.length === 0) return;
      // Sorted, so two instances flushing at once lock the rows in one order.
      buckets.sort((a, b) => a.bucket.getTime() - b.bucket.getTime() || a.facility.localeCompare(b.facility));
      apps.sort((a, b) => a.day.localeCompare(b.day) || a.appId.localeCompare(b.appId));
      await db.transaction().execute(async (trx) => {
        if (buckets.length > 0)
          await sql`
            INSERT INTO request_counts (bucket, facility, requests, client_errors, server_errors)
            SELECT * FROM unnest(${buckets.map((b) => b.bucket.toISOString())}::timestamptz[],
              ${buckets.map((b) => b.facility)}::text[], ${buckets.map((b) => b.requests)}::bigint[],
              ${buckets.map((b) => b.clientErrors)}::bigint[], ${buckets.map((b) => b.serverErrors)}::bigint[])
            ON CONFLICT (bucket, facility) DO UPDATE SET
              requests = request_counts.requests + excluded.requests,
              client_errors = request_counts.client_errors + excluded.client_errors,
              server_errors = request_counts.server_errors + excluded.server_errors`.execute(trx);
        if (apps.length > 0)
          await sql`
            INSERT INTO app_request_days (day, app_id, requests, client_errors, server_errors)
            SELECT * FROM unnest(${apps.map((a) => a.day)}::date[], ${apps.map((a) => a.appId)}::uuid[],
              ${apps.map((a) => a.requests)}::bigint[], ${apps.map((a) => a.clientErrors)}::bigint[],
              ${apps.map((a) => a.serverErrors)}::bigint[])
            ON CONFLICT (day, app_id) DO UPDATE SET
              requests = app_request_days.requests + excluded.requests,
              client_errors = app_request_days.client_errors + excluded.client_errors,
              server_errors = app_request_days.server_errors + excluded.server_errors`.execute(trx);
      });
    },

    async buckets(since) {
      const { rows } = await sql<{
        bucket: Date | string;
        facility: string;
        requests: string | number;
        client_errors: string | number;
        server_errors: string | number;
      }>`
        SELECT bucket, facility, requests, client_errors, server_errors FROM request_counts
        WHERE bucket >= ${since.toISOString()}::timestamptz`.execute(db);
      return rows.map((r) => ({
        bucket: new Date(r.bucket),
        facility: r.facility,
        requests: num(r.requests),
        clientErrors: num(r.client_errors),
        serverErrors: num(r.server_errors),
      }));
    },

    async topApps(day, limit) {
      const { rows } = await sql<{
        app_id: string;
        requests: string | number;
        client_errors: string | number;
        server_errors: string | number;
      }>`
        SELECT app_id, requests, client_errors, server_errors FROM app_request_days
        WHERE day = ${day}::date ORDER BY requests DESC, app_id LIMIT ${limit}`.execute(db);
      return rows.map((r) => ({
        day,
        appId: r.app_id,
        requests: num(r.requests),
        clientErrors: num(r.client_errors),
        serverErrors: num(r.server_errors),
      }));
    },

    async prune(before, beforeDay) {
      const a = await sql`DELETE FROM request_counts WHERE bucket < ${before.toISOString()}::timestamptz`.execute(db);
      const b = await sql`DELETE FROM app_request_days WHERE day < ${beforeDay}::date`.execute(db);
      return Number(a.numAffectedRows ?? 0n) + Number(b.numAffectedRows ?? 0n);
    },
  };
}
