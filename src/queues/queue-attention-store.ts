/**
 * The one cross-app read of the queue tables, for the operator's overview:
 * which queues hold dead letters, and which have a waiting message older than
 * a bound. Apart from `queue-store.ts` because it serves no app: every other
 * statement on these tables is scoped by one app.
 */
import { sql } from "kysely";
import type { Db } from "../core/database/index.ts";
import type { QueueTables } from "./queue-store.ts";

export interface QueueAttentionRow {
  appId: string;
  queue: string;
  deadLetters: number;
  /** Age in seconds of the oldest waiting message, when it is older than the bound; else 0. */
  oldestAgeSeconds: number;
}

/** At most `limit` queues, those with the most dead letters first. */
export async function queuesNeedingAttention(
  database: Db,
  oldAgeSeconds: number,
  limit = 200,
): Promise<QueueAttentionRow[]> {
  const db = database.withTables<QueueTables>();
  const { rows } = await sql<{ app_id: string; queue: string; dead: string | number; age: string | number }>`
    SELECT app_id, queue, sum(dead) AS dead, max(age) AS age FROM (
      SELECT app_id, queue, count(*) AS dead, 0::float8 AS age
        FROM queue_dead_letters GROUP BY app_id, queue
      UNION ALL
      SELECT app_id, queue, 0, extract(epoch FROM now() - min(enqueued_at))::float8
        FROM queue_messages
        WHERE visible_at <= now() AND enqueued_at < now() - make_interval(secs => ${oldAgeSeconds})
        GROUP BY app_id, queue
    ) q
    GROUP BY app_id, queue
    ORDER BY sum(dead) DESC, max(age) DESC
    LIMIT ${limit}`.execute(db);
  return rows.map((r) => ({
    appId: r.app_id,
    queue: r.queue,
    deadLetters: Number(r.dead),
    oldestAgeSeconds: Math.floor(Number(r.age)),
  }));
}
