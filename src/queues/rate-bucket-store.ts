/**
 * The token buckets of rate-limited queues (`queue_rate_buckets`, migration 0034; docs/queues.md
 * "Rate limits"), shared by every instance through PostgreSQL. A bucket fills at the queue's rate up to
 * its burst; a take is one statement that refills it for the time since the last take and grants what
 * it holds (whole tokens, at most what was asked). Time is the database's, so the instances' clocks do
 * not matter.
 */
import { sql } from "kysely";
import type { Db } from "../core/database/index.ts";

export interface RateBucketStore {
  /**
   * Takes up to `n` tokens of the queue's bucket (made full on the queue's first take). `tokens`: what
   * is left after the grant (under 1 when fewer than `n` were granted).
   */
  take(
    appId: string,
    queue: string,
    rate: number,
    burst: number,
    n: number,
  ): Promise<{ granted: number; tokens: number }>;
  /** Puts back tokens taken and not used (the claim found fewer messages), up to the burst. */
  giveBack(appId: string, queue: string, burst: number, n: number): Promise<void>;
  /**
   * Deletes up to `limit` buckets no take needs: of queues whose policy sets no limit any more (a take on a
   * policy an instance had not yet re-read made it again), and of limited queues no take touched for
   * `idleSeconds` (their bucket is full again, as a new one is: the next take makes it afresh); how many.
   */
  sweep(sweep: { idleSeconds: number; limit: number }): Promise<number>;
}

export function createRateBucketStore(db: Db): RateBucketStore {
  return {
    async take(appId, queue, rate, burst, n) {
      // The statement's own time: a take that waited for the row's lock behind another may start before that
      // one's `refilled_at`, so the time added is never negative and `refilled_at` never goes back (no time is
      // counted twice). The small epsilon keeps 0.9999999 tokens from rounding down to none.
      const filled = sql`least(${burst}::float8, b.tokens + ${rate}::float8 *
        greatest(0, extract(epoch FROM statement_timestamp() - b.refilled_at))::float8)`;
      const { rows } = await sql<{ granted: number; tokens: number }>`
        INSERT INTO queue_rate_buckets AS b (app_id, queue, tokens, granted, refilled_at)
        VALUES (${appId}, ${queue}, ${burst}::float8 - least(${n}::int, floor(${burst}::float8)),
                least(${n}::int, floor(${burst}::float8)), statement_timestamp())
        ON CONFLICT (app_id, queue) DO UPDATE SET
          granted = least(${n}::int, floor(${filled} + 1e-9)),
          tokens = greatest(0, ${filled} - least(${n}::int, floor(${filled} + 1e-9))),
          refilled_at = greatest(b.refilled_at, statement_timestamp())
        RETURNING granted, tokens`.execute(db);
      return { granted: Number(rows[0].granted), tokens: Number(rows[0].tokens) };
    },
    async giveBack(appId, queue, burst, n) {
      await sql`
        UPDATE queue_rate_buckets SET tokens = least(${burst}::float8, tokens + ${n}::int)
        WHERE app_id = ${appId} AND queue = ${queue}`.execute(db);
    },
    async sweep({ idleSeconds, limit }) {
      // SKIP LOCKED: a bucket a take holds is in use. A take that committed after this statement's snapshot
      // is seen by the lock's re-check (its `refilled_at` is new), so a bucket in use is never deleted.
      const result = await sql`
        DELETE FROM queue_rate_buckets WHERE (app_id, queue) IN (
          SELECT b.app_id, b.queue FROM queue_rate_buckets b
          WHERE b.refilled_at < statement_timestamp() - make_interval(secs => ${idleSeconds})
             OR NOT EXISTS (SELECT 1 FROM queue_policies p
                            WHERE p.app_id = b.app_id AND p.queue = b.queue AND p.max_deliveries_per_second IS NOT NULL)
          LIMIT ${limit}
          FOR UPDATE OF b SKIP LOCKED
        )`.execute(db);
      return Number(result.numAffectedRows ?? 0n);
    },
  };
}
